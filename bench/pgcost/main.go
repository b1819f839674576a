// Command pgcost prices the write path's statements in Postgres CPU: it
// loads N documents through sink.Store the way the pipeline does (Lookup,
// then Upsert with the vectors of the chunks the cache lacks), then makes a
// 5-character edit in every document, and attributes each backend's CPU to
// the statement it was spent on. The CPU comes from log_statement_stats
// (set for its own sessions only, with log_min_messages raised so nothing
// reaches the server log) reported to the client as notices: each notice
// carries the backend's cumulative CPU, and the difference between two
// consecutive notices is charged to the statement the second one closes
// (the Bind of a statement, which plans it and reads its parameters, is
// shown apart, with whatever the backend did between batches).
//
//	go run ./bench/pgcost [-docs 400] [-doc-bytes 4096]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	neturl "net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvector "github.com/pgvector/pgvector-go/pgx"

	"github.com/ragsync/ragsync/bench/internal/backlog"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

// event is what one connection saw, in order: a new batch or query (group),
// a statement sent, or a statistics notice with the backend's CPU so far.
type event struct {
	kind string // "group", "sql" or the notice's message
	sql  string
	cpu  float64 // seconds, cumulative, for a notice
}

type connLog struct {
	mu     sync.Mutex
	events []event
}

func (l *connLog) add(e ...event) {
	l.mu.Lock()
	l.events = append(l.events, e...)
	l.mu.Unlock()
}

var logs sync.Map // *pgconn.PgConn -> *connLog

func logOf(c *pgconn.PgConn) *connLog {
	v, _ := logs.LoadOrStore(c, &connLog{})
	return v.(*connLog)
}

// tracer records the statements in the order they are sent.
type tracer struct{}

func (tracer) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	logOf(c.PgConn()).add(event{kind: "group"}, event{kind: "sql", sql: d.SQL})
	return ctx
}
func (tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (tracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	es := []event{{kind: "group"}}
	for _, q := range d.Batch.QueuedQueries {
		es = append(es, event{kind: "sql", sql: q.SQL})
	}
	logOf(c.PgConn()).add(es...)
	return ctx
}
func (tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

var (
	totalRE  = regexp.MustCompile(`\[([0-9.]+) s user, ([0-9.]+) s system total\]`)
	schemaRE = regexp.MustCompile(`"[a-z_0-9]+"\.`)
)

func label(sql string) string {
	s := schemaRE.ReplaceAllString(strings.Join(strings.Fields(sql), " "), "")
	return s[:min(len(s), 100)]
}

func main() {
	docs := flag.Int("docs", 400, "documents to load, then edit")
	size := flag.Int("doc-bytes", 4096, "approximate size of each document's text")
	adminURL := flag.String("pg", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"Postgres URL of a database to connect to for creating the run's database")
	flag.Parse()
	if err := run(context.Background(), *adminURL, *docs, *size); err != nil {
		fmt.Fprintln(os.Stderr, "pgcost:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, adminURL string, docs, size int) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("bench_pgcost_%d", time.Now().UnixNano()%1e9)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "DROP DATABASE "+name+" WITH (FORCE)")
	u, err := neturl.Parse(adminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	url := u.String()

	mp, err := sink.OpenPool(ctx, url, "ragsync")
	if err != nil {
		return err
	}
	err = migrations.Up(ctx, mp, "ragsync", nil)
	mp.Close()
	if err != nil {
		return err
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = "ragsync, public"
	cfg.ConnConfig.Tracer = tracer{}
	cfg.ConnConfig.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		m := totalRE.FindStringSubmatch(n.Detail)
		if m == nil {
			return
		}
		u, _ := strconv.ParseFloat(m[1], 64)
		s, _ := strconv.ParseFloat(m[2], 64)
		logOf(c).add(event{kind: n.Message, cpu: u + s})
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if err := pgxvector.RegisterTypes(ctx, c); err != nil {
			return err
		}
		// Session settings only: statistics to this client, none to the
		// server's log.
		_, err := c.Exec(ctx, "SET log_min_messages = fatal; SET client_min_messages = log; SET log_statement_stats = on")
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Index: "bench", Model: "hashing", Dimensions: 384, SkipFullText: true})
	if err != nil {
		return err
	}
	split, err := chunker.New(chunker.Config{})
	if err != nil {
		return err
	}
	emb := embedder.NewHashing(384)
	texts := corpus(docs, size)

	phase := func(title string, version uint64, edit bool) error {
		logs.Range(func(_, v any) bool {
			l := v.(*connLog)
			l.mu.Lock()
			l.events = nil
			l.mu.Unlock()
			return true
		})
		var mu sync.Mutex
		inserted := 0
		errs := make(chan error, 2)
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for d := w; d < docs; d += 2 {
					text := texts[d]
					if edit {
						mid := len(text) / 2
						text = text[:mid] + "EDIT5" + text[mid+5:]
					}
					n, err := write(ctx, st, split, emb, d, version, text)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					inserted += n
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		report(title, docs, inserted)
		return nil
	}
	if err := phase("load", 1, false); err != nil {
		return err
	}
	return phase("edit (5 characters in every document)", 2, true)
}

// write applies one document as the pipeline does and returns the chunk
// rows it inserted.
func write(ctx context.Context, st *sink.Store, split *chunker.Chunker, emb *embedder.Hashing, d int, version uint64, text string) (int, error) {
	doc := sink.Document{Table: "public.articles", Key: strconv.Itoa(d),
		Version: cdc.Version{Kind: "pg", Parts: []uint64{version<<32 | uint64(d)}}}
	doc.ID = sink.DocID(doc.Table, doc.Key)
	var hashes []string
	for _, c := range split.Split(text) {
		doc.Chunks = append(doc.Chunks, sink.Chunk{Position: c.Position, Hash: c.Hash, Text: c.Text, Tokens: c.Tokens})
		hashes = append(hashes, c.Hash)
	}
	l, err := st.Lookup(ctx, doc.ID, hashes)
	if err != nil {
		return 0, err
	}
	for i := range doc.Chunks {
		if !l.Cached[doc.Chunks[i].Hash] {
			v, err := emb.Embed(ctx, []string{doc.Chunks[i].Text})
			if err != nil {
				return 0, err
			}
			doc.Chunks[i].Vector = v[0]
		}
	}
	out, err := st.Upsert(ctx, doc)
	return out.Inserted, err
}

// report charges each connection's CPU to its statements and prints the
// per-document costs, largest first.
func report(title string, docs, inserted int) {
	by := map[string]float64{}
	runs := map[string]int{}
	total := 0.0
	logs.Range(func(_, v any) bool {
		l := v.(*connLog)
		var sqls []string
		prev, next := -1.0, 0
		for _, e := range l.events {
			switch e.kind {
			case "group":
				next = len(sqls)
				continue
			case "sql":
				sqls = append(sqls, e.sql)
				continue
			}
			closes := strings.HasPrefix(e.kind, "EXECUTE") || e.kind == "QUERY STATISTICS"
			if prev < 0 { // the connection's first notice is the baseline
				prev = e.cpu
				if closes {
					next++
				}
				continue
			}
			d := e.cpu - prev
			prev = e.cpu
			total += d
			key := "(parse)"
			switch {
			case strings.HasPrefix(e.kind, "PARSE"):
			case strings.HasPrefix(e.kind, "BIND"):
				if next < len(sqls) {
					key = "  bind: " + label(sqls[next])
				}
			case closes:
				if next < len(sqls) {
					key = label(sqls[next])
					runs[key]++
				}
				next++
			}
			by[key] += d
		}
		return true
	})
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return by[keys[i]] > by[keys[j]] })
	fmt.Printf("\n%s: %d documents, %d chunk rows inserted, backends' CPU %.3f ms/document\n", title, docs, inserted, total*1000/float64(docs))
	for _, k := range keys {
		fmt.Printf("  %7.3f ms/doc  %5d runs  %s\n", by[k]*1000/float64(docs), runs[k], k)
	}
}

// corpus is distinct prose, as bench/throughput's.
func corpus(docs, size int) []string {
	out := make([]string, docs)
	for d := range out {
		rng := rand.New(rand.NewPCG(uint64(d), 15))
		var b strings.Builder
		b.WriteString(fmt.Sprintf("# Document %d\n\n", d))
		for b.Len() < size {
			for w := range 60 {
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(backlog.Word(rng))
				if w%12 == 11 {
					b.WriteByte('.')
				}
			}
			b.WriteString(".\n\n")
		}
		out[d] = b.String()
	}
	return out
}
