package backfill_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// world is one test's source database (its own schema of the test
// database, holding table articles) and index (its own migrated schema).
type world struct {
	t        *testing.T
	src      *pgxpool.Pool // the document database
	srcName  string        // source schema
	ix       *pgxpool.Pool // the index's schema
	ixSchema string
}

const template = "# {{title}}\n\n{{body}}"

func newWorld(t *testing.T) *world {
	t.Helper()
	ix, schema := pgtest.Schema(t)
	var b [5]byte
	_, _ = rand.Read(b[:])
	w := &world{t: t, ix: ix, ixSchema: schema, srcName: "src_" + hex.EncodeToString(b[:])}
	ctx := context.Background()
	src, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	w.src = src
	t.Cleanup(func() {
		_, err := src.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+w.srcName+" CASCADE")
		if err != nil {
			t.Errorf("drop %s: %v", w.srcName, err)
		}
		src.Close()
	})
	_, err = src.Exec(ctx, "CREATE SCHEMA "+w.srcName+"; CREATE TABLE "+w.table()+" (id int PRIMARY KEY, title text NOT NULL, body text NOT NULL)")
	require.NoError(t, err)
	return w
}

func (w *world) table() string { return w.srcName + ".articles" }

// body is a few paragraphs, so a document makes several chunks.
func body(id, rev int) string {
	var b strings.Builder
	for p := 0; p < 3; p++ {
		fmt.Fprintf(&b, "Paragraph %d of article %d, revision %d. It talks about topic %d at some length so that the chunker has words to cut.\n\n", p, id, rev, (id*7+p)%13)
	}
	return b.String()
}

func (w *world) seed(n int) {
	w.t.Helper()
	_, err := w.src.Exec(context.Background(), "INSERT INTO "+w.table()+" SELECT g, 'Title '||g, '' FROM generate_series(1, $1) g", n)
	require.NoError(w.t, err)
	for id := 1; id <= n; id++ {
		_, err := w.src.Exec(context.Background(), "UPDATE "+w.table()+" SET body = $2 WHERE id = $1", id, body(id, 0))
		require.NoError(w.t, err)
	}
}

func (w *world) config(pageRows int) backfill.Config {
	return backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.table()}}, PageRows: pageRows}
}

// store opens index name in the world's index schema.
func (w *world) store(name string, emb embedder.Client) *sink.Store {
	w.t.Helper()
	st, err := sink.OpenIndex(context.Background(), w.ix, sink.Config{Mode: sink.Write, Create: true, Schema: w.ixSchema, Index: name, Model: emb.Model(), Dimensions: emb.Dimensions()})
	require.NoError(w.t, err)
	return st
}

// pipeline wires src to st through the real stages, as cmd/ragsync does.
func (w *world) pipeline(src pipeline.Source, emb pipeline.Embedder, st pipeline.Index) *pipeline.Pipeline {
	w.t.Helper()
	ch, err := chunker.New(chunker.Config{Strategy: "greedy", TargetTokens: 30, MinTokens: 10, MaxTokens: 120}.WithDefaults())
	require.NoError(w.t, err)
	p, err := pipeline.New(pipeline.Config{
		Tables:       []pipeline.TableConfig{{Match: w.table(), Text: template, ID: []string{"id"}}},
		Workers:      2,
		RetryBackoff: 10 * time.Millisecond,
	}, pipeline.Stages{Source: src, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: st, Embedder: emb}})
	require.NoError(w.t, err)
	return p
}

// backfill runs a whole backfill of the world's table into st.
func (w *world) backfill(cfg backfill.Config, cp backfill.Checkpoints, emb pipeline.Embedder, st pipeline.Index) *backfill.Source {
	w.t.Helper()
	src, err := backfill.Open(context.Background(), cfg, cp)
	require.NoError(w.t, err)
	defer src.Close()
	require.NoError(w.t, w.pipeline(src, emb, st).Run(context.Background()))
	return src
}

// docState is a stored document as the comparisons see it.
type docState struct {
	Live    bool
	Version string
	Hashes  string
}

// docs reads every document of index name.
func (w *world) docs(name string) map[string]docState {
	w.t.Helper()
	rows, err := w.ix.Query(context.Background(), `SELECT d.id, d.deleted_at IS NULL, d.version,
		coalesce(string_agg(c.content_hash, ',' ORDER BY c.position), '')
		FROM documents d LEFT JOIN chunks c ON c.index_name = d.index_name AND c.doc_id = d.id
		WHERE d.index_name = $1 GROUP BY d.id, d.deleted_at, d.version`, name)
	require.NoError(w.t, err)
	out := map[string]docState{}
	for rows.Next() {
		var id string
		var d docState
		require.NoError(w.t, rows.Scan(&id, &d.Live, &d.Version, &d.Hashes))
		out[id] = d
	}
	require.NoError(w.t, rows.Err())
	return out
}

// fetchAll drains src, acknowledging every batch, and returns the changes
// the messages carry.
func fetchAll(t *testing.T, src *backfill.Source) []cdc.Change {
	t.Helper()
	var out []cdc.Change
	for {
		b, err := src.Fetch(context.Background())
		if err != nil {
			require.ErrorIs(t, err, errEOF)
			return out
		}
		for _, m := range b.Records {
			out = append(out, handedOver(t, m))
		}
		if b.Ack != nil {
			require.NoError(t, b.Ack(context.Background()))
		}
	}
}

func sanitize(s string) string { return pgx.Identifier{s}.Sanitize() }

// handedOver is the change m carries: the backfill hands over changes, never
// bytes to decode.
func handedOver(t *testing.T, m cdc.Record) cdc.Change {
	t.Helper()
	require.NoError(t, m.Err)
	require.NotNil(t, m.Change)
	require.Nil(t, m.Value)
	require.Equal(t, m.Change.Coord.Offset, m.Offset, "the message carries the change's coordinates")
	return *m.Change
}
