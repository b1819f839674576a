package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"
	pgxvector "github.com/pgvector/pgvector-go/pgx"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// docRows are one document's chunks as serve stores them: the default
// chunker over the rendered text, and the vectors the test server returns
// (the Hashing embedder's).
type docRows struct {
	id     string
	row    []byte // the source row as JSON, as documents.row holds it
	chunks []chunker.Chunk
	vecs   []pgvector.Vector
}

func rowsOf(ctx context.Context, c *corpus, dims int) ([]docRows, int, error) {
	ch, err := chunker.New(chunker.Config{})
	if err != nil {
		return nil, 0, err
	}
	h := embedder.NewHashing(dims)
	var out []docRows
	n := 0
	for d := range c.titles {
		chunks := ch.Split(c.text(d))
		texts := make([]string, len(chunks))
		for i, x := range chunks {
			texts[i] = x.Text
		}
		vecs, err := h.Embed(ctx, texts)
		if err != nil {
			return nil, 0, err
		}
		row, _ := json.Marshal(map[string]any{"id": d, "title": c.titles[d], "body": c.bodies[d], "status": loadStatus})
		dr := docRows{id: fmt.Sprintf("public.articles/%d", d), row: row, chunks: chunks}
		for _, v := range vecs {
			dr.vecs = append(dr.vecs, pgvector.NewVector(v))
		}
		out = append(out, dr)
		n += len(chunks)
	}
	return out, n, nil
}

type timing struct {
	rows    int
	elapsed time.Duration
	pgCPU   time.Duration // client backends
	pgAll   time.Duration // every Postgres process, see pgUsage
}

func (t timing) perRowMs(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / float64(t.rows)
}

func (t timing) rate() float64 { return float64(t.rows) / t.elapsed.Seconds() }

// insertAll runs write for every document over conns connections to db,
// documents dealt round-robin, and times it with the backends' CPU.
func insertAll(ctx context.Context, db *database, conns int, docs []docRows, rows int,
	write func(ctx context.Context, c *pgx.Conn, d docRows) error) (timing, error) {
	cs := make([]*pgx.Conn, conns)
	for i := range cs {
		var err error
		if cs[i], err = pgx.Connect(ctx, db.url); err != nil {
			return timing{}, err
		}
		defer cs[i].Close(ctx)
		if err := pgxvector.RegisterTypes(ctx, cs[i]); err != nil {
			return timing{}, err
		}
	}
	stop := make(chan struct{})
	pgCPU := db.backendCPU(ctx, stop)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for i, c := range cs {
		g.Go(func() error {
			for k := i; k < len(docs); k += conns {
				if err := write(gctx, c, docs[k]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	err := g.Wait()
	t := timing{rows: rows, elapsed: time.Since(start)}
	// The sampler reads every 100 ms; one more reading after the last
	// insert catches the backends' final CPU before they close.
	time.Sleep(150 * time.Millisecond)
	close(stop)
	pg := pgCPU()
	t.pgCPU, t.pgAll = pg.backends, pg.all
	return t, err
}

// hnswIndex is the index sink.OpenIndex creates, on a bare table.
func hnswIndex(table string, dims int) string {
	return fmt.Sprintf("CREATE INDEX ON %s USING hnsw ((embedding::vector(%d)) vector_cosine_ops)", table, dims)
}

// rawLimit is parallel INSERTs of the load's vectors into a bare table with
// the same HNSW index: what Postgres can take from that many connections,
// whatever feeds it. With o.rawBatch 1 each row is its own INSERT and
// transaction; above 1, the vectors go in statements of that many rows
// (one unnest INSERT, one transaction each), as a batched loader writes
// them: fewer commits and round trips, the same HNSW work per row.
func rawLimit(ctx context.Context, o options, c *corpus) (timing, error) {
	docs, n, err := rowsOf(ctx, c, o.dims)
	if err != nil {
		return timing{}, err
	}
	db, err := createDatabase(ctx, o.adminURL)
	if err != nil {
		return timing{}, err
	}
	defer db.drop(ctx)
	if err := execAll(ctx, db, "CREATE TABLE raw (id bigserial PRIMARY KEY, embedding vector NOT NULL)", hnswIndex("raw", o.dims)); err != nil {
		return timing{}, err
	}
	if o.rawBatch > 1 {
		docs = batchRows(docs, o.rawBatch)
		return insertAll(ctx, db, o.conns, docs, n, func(ctx context.Context, c *pgx.Conn, d docRows) error {
			_, err := c.Exec(ctx, "INSERT INTO raw (embedding) SELECT unnest($1::vector[])", d.vecs)
			return err
		})
	}
	return insertAll(ctx, db, o.conns, docs, n, func(ctx context.Context, c *pgx.Conn, d docRows) error {
		for _, v := range d.vecs {
			if _, err := c.Exec(ctx, "INSERT INTO raw (embedding) VALUES ($1)", v); err != nil {
				return err
			}
		}
		return nil
	})
}

// batchRows regroups the documents' vectors, in order, into groups of
// size rows (the last may be shorter); only vecs is filled.
func batchRows(docs []docRows, size int) []docRows {
	var out []docRows
	var cur docRows
	for _, d := range docs {
		for _, v := range d.vecs {
			cur.vecs = append(cur.vecs, v)
			if len(cur.vecs) == size {
				out = append(out, cur)
				cur = docRows{}
			}
		}
	}
	if len(cur.vecs) > 0 {
		out = append(out, cur)
	}
	return out
}

func execAll(ctx context.Context, db *database, stmts ...string) error {
	conn, err := pgx.Connect(ctx, db.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// writeCosts prices, per chunk, what the chunks table writes beyond the
// HNSW index: each variant loads the same documents, one transaction per
// document, into fresh tables of the bench's own, shaped like the
// migrations' (priced_rows like the chunk rows without tsv, + the generated
// tsvector and its GIN index, + a priced_cache row per chunk like the
// embedding cache's, + a priced_sources row with the source JSON like the
// document rows'). Their names share nothing with the index's tables, so
// nothing here reads as SQL on them: only sink writes those.
func writeCosts(ctx context.Context, o options, c *corpus) error {
	docs, n, err := rowsOf(ctx, c, o.dims)
	if err != nil {
		return err
	}
	const pricedRows = `CREATE TABLE priced_rows (id bigserial PRIMARY KEY, doc_id text NOT NULL, position int NOT NULL,
		content_hash text NOT NULL, text text NOT NULL, tokens int NOT NULL, embedding vector NOT NULL %s)`
	insertChunks := func(ctx context.Context, tx pgx.Tx, d docRows) error {
		b := &pgx.Batch{}
		for i, ch := range d.chunks {
			b.Queue("INSERT INTO priced_rows (doc_id, position, content_hash, text, tokens, embedding) VALUES ($1, $2, $3, $4, $5, $6)",
				d.id, ch.Position, ch.Hash, ch.Text, ch.Tokens, d.vecs[i])
		}
		return tx.SendBatch(ctx, b).Close()
	}
	variants := []struct {
		name  string
		ddl   []string
		extra func(ctx context.Context, tx pgx.Tx, d docRows) error
	}{
		{name: "chunk rows + HNSW", ddl: []string{fmt.Sprintf(pricedRows, ""), hnswIndex("priced_rows", o.dims)}},
		{name: "+ tsvector column and GIN index", ddl: []string{
			fmt.Sprintf(pricedRows, ", tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED"),
			hnswIndex("priced_rows", o.dims), "CREATE INDEX ON priced_rows USING gin (tsv)"}},
		{name: "+ a cache row per chunk", ddl: []string{fmt.Sprintf(pricedRows, ""), hnswIndex("priced_rows", o.dims),
			`CREATE TABLE priced_cache (model text NOT NULL, dimensions int NOT NULL, content_hash text NOT NULL,
				embedding vector NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), last_used_at timestamptz NOT NULL DEFAULT now(),
				PRIMARY KEY (model, dimensions, content_hash))`, "CREATE INDEX ON priced_cache (last_used_at)"},
			extra: func(ctx context.Context, tx pgx.Tx, d docRows) error {
				b := &pgx.Batch{}
				for i, ch := range d.chunks {
					b.Queue("INSERT INTO priced_cache (model, dimensions, content_hash, embedding) VALUES ('m', $1, $2, $3) ON CONFLICT DO NOTHING",
						o.dims, ch.Hash, d.vecs[i])
				}
				return tx.SendBatch(ctx, b).Close()
			}},
		{name: "+ a row per document with the source JSON", ddl: []string{fmt.Sprintf(pricedRows, ""), hnswIndex("priced_rows", o.dims),
			"CREATE TABLE priced_sources (id text PRIMARY KEY, metadata jsonb NOT NULL DEFAULT '{}', row jsonb)"},
			extra: func(ctx context.Context, tx pgx.Tx, d docRows) error {
				_, err := tx.Exec(ctx, "INSERT INTO priced_sources (id, row) VALUES ($1, $2)", d.id, string(d.row))
				return err
			}},
	}
	fmt.Printf("\nwhat each part of a chunk's write costs (%d documents, %d chunks, %d connections, one transaction per document, median of %d alternated rounds):\n",
		len(docs), n, o.conns, o.costRounds)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	wall := make([][]float64, len(variants))
	cpu := make([][]float64, len(variants))
	for range o.costRounds {
		for i, v := range variants {
			db, err := createDatabase(ctx, o.adminURL)
			if err != nil {
				return err
			}
			if err := execAll(ctx, db, v.ddl...); err != nil {
				db.drop(ctx)
				return err
			}
			t, err := insertAll(ctx, db, o.conns, docs, n, func(ctx context.Context, c *pgx.Conn, d docRows) error {
				return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
					if err := insertChunks(ctx, tx, d); err != nil {
						return err
					}
					if v.extra != nil {
						return v.extra(ctx, tx, d)
					}
					return nil
				})
			})
			db.drop(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			wall[i] = append(wall[i], ms(t.elapsed)*float64(o.conns))
			cpu[i] = append(cpu[i], ms(t.pgCPU))
		}
	}
	fmt.Println("| variant | wall ms/chunk | PG CPU ms/chunk | Δ wall ms/chunk | Δ PG CPU ms/chunk | PG CPU ÷ first |")
	fmt.Println("|---|---|---|---|---|---|")
	w0, c0 := median(wall[0]), median(cpu[0])
	for i, v := range variants {
		w, c := median(wall[i]), median(cpu[i])
		fmt.Printf("| %s | %.3f | %.3f | %+.3f | %+.3f | %.2f |\n", v.name, w, c, w-w0, c-c0, c/c0)
	}
	fmt.Println("(wall ms/chunk is connection-time: elapsed × connections ÷ chunks)")
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	switch {
	case len(s) == 0:
		return 0
	case len(s)%2 == 0:
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
