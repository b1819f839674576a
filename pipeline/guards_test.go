package pipeline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// newPipeline builds a pipeline over st (nil: the bundle's store) with the
// fatal classifier serve uses, fast retries, and the given config.
func (b bundle) newPipeline(t *testing.T, src pipeline.Source, cfg pipeline.Config, st pipeline.Index) *pipeline.Pipeline {
	t.Helper()
	ch, err := chunker.New(chunker.Config{Strategy: "greedy", TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	cfg.RetryBackoff, cfg.MaxRetryBackoff = 1, 2
	if st == nil {
		st = b.store
	}
	p, err := pipeline.New(cfg, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   sink.Retryable, Fatal: sink.Fatal, Target: pipeline.Target{Name: "docs", Index: st, Embedder: b.emb},
	})
	require.NoError(t, err)
	return p
}

func (d *memDLQ) all() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.letters...)
}

// rawEvent is a Debezium PostgreSQL change to public.<table> with a string
// key, for values debeziumtest cannot express.
func rawEvent(table, op, id string, lsn int64, after map[string]any) cdc.Record {
	p := map[string]any{"op": op, "source": map[string]any{"connector": "postgresql", "schema": "public", "table": table,
		"lsn": lsn, "txId": lsn, "ts_ms": 1700000000000}}
	if op == "d" {
		p["before"] = map[string]any{"id": id}
	} else {
		row := map[string]any{"id": id}
		for k, v := range after {
			row[k] = v
		}
		p["after"] = row
	}
	v, _ := json.Marshal(p)
	k, _ := json.Marshal(map[string]any{"id": id})
	return cdc.Record{Raw: cdc.Raw{Topic: "db.public." + table, Offset: lsn, Key: k, Value: v}}
}

// TestNULIsStrippedNotRetried: a NUL in a text column (which Postgres text
// and jsonb cannot hold) is removed from the stored row and the embedded
// text; the change applies at the first attempt.
func TestNULIsStrippedNotRetried(t *testing.T) {
	b := setup(t)
	src := &sliceSource{batches: [][]cdc.Record{{
		event("c", 1, 10, "tide\x00pools "+paraA),
		rawEvent("docs", "c", "2", 11, map[string]any{"body": paraB, "tags": []any{"a\x00b"}, "x\x00y": "k"}),
	}}}
	p := b.newPipeline(t, src, pipeline.Config{}, nil)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, b.dlq.all())
	require.Zero(t, p.Stats()["retries"], "a NUL is never retried")
	require.Equal(t, 2, p.Stats()["nul_stripped"])
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, "tidepools "+paraA, txt)
	d, ok, err := b.store.Document(t.Context(), "public.docs/2")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []any{"ab"}, d.Row["tags"])
	require.Equal(t, "k", d.Row["xy"])
	for _, s := range b.emb.embedded() {
		require.NotContains(t, s, "\x00")
	}
}

// TestDataErrorIsDeadLetteredWithoutRetry: a row Postgres rejects for its
// data (a NUL in the document key: SQLSTATE 22021) fails the same way on
// every attempt, so it is dead-lettered at once, and the rest applies.
func TestDataErrorIsDeadLetteredWithoutRetry(t *testing.T) {
	b := setup(t)
	src := &sliceSource{batches: [][]cdc.Record{{
		rawEvent("docs", "c", "bad\x00key", 10, map[string]any{"body": paraA}),
		event("c", 2, 11, paraB),
	}}}
	p := b.newPipeline(t, src, pipeline.Config{MaxAttempts: 5}, nil)
	require.NoError(t, p.Run(t.Context()))
	letters := b.dlq.all()
	require.Len(t, letters, 1)
	require.ErrorContains(t, letters[0], "SQLSTATE 22")
	var perm interface{ Permanent() bool }
	require.True(t, errors.As(letters[0], &perm) && perm.Permanent(), "%v", letters[0])
	require.Zero(t, p.Stats()["retries"], "a data error is not retried")
	_, ok := b.text(t, "public.docs/2")
	require.True(t, ok)
	require.EqualValues(t, 1, src.acked.Load())
}

// hookSource runs before(i) ahead of handing out batch i.
type hookSource struct {
	sliceSource
	n      int
	before func(i int)
}

func (s *hookSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	s.before(s.n)
	s.n++
	return s.sliceSource.Fetch(ctx)
}

// TestRevokeMidRunStops revokes the pipeline's role's privileges on its
// schema between two batches: the pipeline stops at once with the fix
// (SQLSTATE 42501 is fatal), dead-letters nothing and does not acknowledge
// the second batch.
func TestRevokeMidRunStops(t *testing.T) {
	admin, schema := pgtest.Schema(t)
	ctx := t.Context()
	var rb [5]byte
	_, _ = rand.Read(rb[:])
	role := "ragsync_t_" + hex.EncodeToString(rb[:])
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		// Only what this test created: its role's grants, then the role.
		ctx := context.Background()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+role)
	})
	// The role owns the schema's tables, as an application role would
	// (opening the index resolves its name among the aliases and creates
	// its HNSW index); REVOKE then takes away even the owner's own
	// privileges.
	_, err = admin.Exec(ctx, "GRANT USAGE, CREATE ON SCHEMA "+schema+" TO "+role)
	require.NoError(t, err)
	for _, table := range []string{"documents", "chunks", "embedding_cache", "indexes", "aliases", "truncations"} {
		_, err := admin.Exec(ctx, "ALTER TABLE "+schema+"."+table+" OWNER TO "+role)
		require.NoError(t, err)
	}
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.User = url.User(role)
	pool, err := sink.OpenPool(ctx, u.String(), schema)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	b := bundle{store: st, emb: &countingEmbedder{}, dlq: &memDLQ{}}

	var second []cdc.Record
	for i := range 20 {
		second = append(second, event("c", 100+i, int64(100+i), fmt.Sprintf("doc %d. %s", i, paraB)))
	}
	src := &hookSource{sliceSource: sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}, second}}}
	src.before = func(i int) {
		if i == 1 {
			// The pipeline fetches while it applies: revoke once the first
			// batch is acknowledged, so that it is the second that meets it.
			require.Eventually(t, func() bool { return src.acked.Load() == 1 }, 30*time.Second, time.Millisecond)
			_, err := admin.Exec(ctx, "REVOKE ALL ON ALL TABLES IN SCHEMA "+schema+" FROM "+role)
			require.NoError(t, err)
		}
	}
	p := b.newPipeline(t, src, pipeline.Config{MaxAttempts: 5}, nil)
	err = p.Run(ctx)
	require.Error(t, err)
	require.ErrorContains(t, err, "SQLSTATE 42501")
	require.ErrorContains(t, err, "GRANT", "the error says the fix")
	require.True(t, sink.Fatal(err))
	require.Empty(t, b.dlq.all(), "nothing is dead-lettered")
	require.Zero(t, p.Stats()["retries"], "a lost privilege is not retried")
	require.EqualValues(t, 1, src.acked.Load(), "the second batch is not acknowledged")
}

// permErr is a failure no retry fixes.
type permErr struct{ msg string }

func (e permErr) Error() string   { return e.msg }
func (e permErr) Permanent() bool { return true }

func TestDeadLetterGuard(t *testing.T) {
	b := setup(t)
	b.emb.fail = func(texts []string) error {
		for _, s := range texts {
			if strings.Contains(s, "poison") {
				return permErr{"input rejected"}
			}
		}
		return nil
	}
	batch := func(base, poison int) []cdc.Record {
		var msgs []cdc.Record
		for i := range 10 {
			body := fmt.Sprintf("doc %d. %s", base+i, paraA)
			if i < poison {
				body = "poison " + body
			}
			msgs = append(msgs, event("c", base+i, int64(base+i), body))
		}
		return msgs
	}

	t.Run("below the limit", func(t *testing.T) {
		src := &sliceSource{batches: [][]cdc.Record{batch(100, 5)}}
		p := b.newPipeline(t, src, pipeline.Config{Workers: 1, DeadLetterWindow: 10, DeadLetterMaxRatio: 0.5}, nil)
		require.NoError(t, p.Run(t.Context()))
		require.EqualValues(t, 1, src.acked.Load())
		require.Equal(t, 5, p.Stats()["dead_lettered"])
		require.True(t, p.Healthy())
	})
	t.Run("over the limit", func(t *testing.T) {
		before := len(b.dlq.all())
		src := &sliceSource{batches: [][]cdc.Record{batch(200, 8)}}
		p := b.newPipeline(t, src, pipeline.Config{Workers: 1, DeadLetterWindow: 10, DeadLetterMaxRatio: 0.5}, nil)
		err := p.Run(t.Context())
		require.ErrorContains(t, err, "dead-letter guard")
		require.ErrorContains(t, err, "pipeline.dead_letter_max_ratio")
		require.ErrorContains(t, err, "input rejected", "the last cause is named")
		require.Zero(t, src.acked.Load(), "the batch is not acknowledged")
		require.Equal(t, 5, len(b.dlq.all())-before, "the sixth dead letter trips the guard instead of being written")
		require.False(t, p.Healthy(), "/readyz fails")
	})
}

// TestUnmatchedTablesAreNotApplied: with tables configured, deletes and
// truncates of other tables change nothing and leave no rows; a glob
// pattern matches like the decoder's.
func TestUnmatchedTablesAreNotApplied(t *testing.T) {
	pool, schema := pgtest.Schema(t)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	b := bundle{store: st, emb: &countingEmbedder{}, dlq: &memDLQ{}}
	other := func(op string, id int, lsn int64) cdc.Record {
		m := event(op, id, lsn, paraB)
		m.Value = bytes.Replace(m.Value, []byte(`"table":"docs"`), []byte(`"table":"other"`), 1)
		return m
	}
	src := &sliceSource{batches: [][]cdc.Record{{
		event("c", 1, 10, paraA),
		other("c", 5, 11),
		other("d", 6, 12),
		other("t", 0, 13),
	}}}
	p := b.newPipeline(t, src, pipeline.Config{Tables: []pipeline.TableConfig{{Match: "public.do*"}}}, nil)
	require.NoError(t, p.Run(t.Context()))
	require.Equal(t, 3, p.Stats()["unmatched_table"], "create, delete and truncate of public.other")
	_, ok := b.text(t, "public.docs/1")
	require.True(t, ok, "public.do* matches public.docs")
	for _, id := range []string{"public.other/5", "public.other/6"} {
		_, found, err := b.store.Document(t.Context(), id)
		require.NoError(t, err)
		require.False(t, found, "no row, not even a tombstone, for %s", id)
	}
	// A later create of public.other is not fenced by a truncate row.
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM truncations WHERE source_table = 'public.other'").Scan(&n))
	require.Zero(t, n, "no truncate fence for a table not in tables")
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTemplateMissingColumns: rows lacking template columns are counted
// and warned about once per table with the names; a row with none of them
// is dead-lettered instead of indexing the template's bare "#".
func TestTemplateMissingColumns(t *testing.T) {
	b := setup(t)
	var logs syncBuf
	src := &sliceSource{batches: [][]cdc.Record{{
		rawEvent("docs", "c", "1", 10, map[string]any{"body": paraA}),
		rawEvent("docs", "c", "2", 11, map[string]any{"body": paraB}),
		rawEvent("docs", "c", "3", 12, map[string]any{"summary": paraC}),
	}}}
	p := b.newPipeline(t, src, pipeline.Config{
		Tables: []pipeline.TableConfig{{Match: "public.docs", Text: "# {{title}}\n\n{{body}}"}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, nil)
	require.NoError(t, p.Run(t.Context()))
	require.Equal(t, 3, p.Stats()["template_missing_columns"])
	require.Equal(t, 1, strings.Count(logs.String(), "rows lack columns"), "one warning per table: %s", logs.String())
	// The warning names the columns of the first row applied, which the
	// flow does not fix: documents are applied concurrently.
	require.Regexp(t, `missing_columns="?\[title( body)?\]`, logs.String())
	letters := b.dlq.all()
	require.Len(t, letters, 1)
	require.ErrorContains(t, letters[0], "none of the columns tables[].text names ([title body])")
	_, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	_, found, err := b.store.Document(t.Context(), "public.docs/3")
	require.NoError(t, err)
	require.False(t, found)
	for _, s := range b.emb.embedded() {
		require.NotEqual(t, "#", strings.TrimSpace(s), "no bare template chunk")
	}
}

func TestMaxDocumentBytes(t *testing.T) {
	b := setup(t)
	big := strings.Repeat(paraA+" ", 40) // ~3.5 KB
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, big), event("c", 2, 11, paraB)}}}
	p := b.newPipeline(t, src, pipeline.Config{MaxDocumentBytes: 2000}, nil)
	require.NoError(t, p.Run(t.Context()))
	letters := b.dlq.all()
	require.Len(t, letters, 1)
	require.ErrorContains(t, letters[0], "over pipeline.max_document_bytes (2000)")
	require.Zero(t, p.Stats()["retries"])
	_, ok := b.text(t, "public.docs/2")
	require.True(t, ok)
	for _, s := range b.emb.embedded() {
		require.NotContains(t, s, big[:200], "the oversized document was never embedded")
	}
}

// failingSink fails every upsert, as a document transaction that never
// commits (a crash, a stop) would.
type failingSink struct {
	pipeline.Index
	fail atomic.Bool
}

func (f *failingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	if f.fail.Load() {
		return sink.Outcome{}, permErr{"document transaction lost"}
	}
	return f.Index.Upsert(ctx, d)
}

// TestLargeDocumentEmbedsInSlicesAndCachesAsItGoes: a document is embedded
// EmbedSliceChunks texts at a time and each slice is cached at once, so
// when its transaction fails, the replay pays for no embedding again.
func TestLargeDocumentEmbedsInSlicesAndCachesAsItGoes(t *testing.T) {
	b := setup(t)
	var paras []string
	for i := range 30 {
		paras = append(paras, fmt.Sprintf("Paragraph %d of the long document talks about item %d in some detail, at length.", i, i*7919))
	}
	doc := strings.Join(paras, "\n\n")
	var maxBatch atomic.Int32
	b.emb.fail = func(texts []string) error {
		if int32(len(texts)) > maxBatch.Load() {
			maxBatch.Store(int32(len(texts)))
		}
		return nil
	}
	fs := &failingSink{Index: b.store}
	fs.fail.Store(true)
	cfg := pipeline.Config{EmbedSliceChunks: 4, Workers: 1}
	p := b.newPipeline(t, &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, doc)}}}, cfg, fs)
	require.NoError(t, p.Run(t.Context()))
	require.Len(t, b.dlq.all(), 1, "the lost transaction dead-letters the document")
	first := len(b.emb.embedded())
	require.Greater(t, first, 8, "the document has several slices")
	require.LessOrEqual(t, maxBatch.Load(), int32(4), "no call embeds more than a slice")

	// Replay: every vector comes from the cache.
	fs.fail.Store(false)
	p = b.newPipeline(t, &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, doc)}}}, cfg, fs)
	require.NoError(t, p.Run(t.Context()))
	require.Len(t, b.emb.embedded(), first, "nothing is embedded twice")
	require.Equal(t, first, p.Stats()["chunks_cached"])
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, doc, txt)
}
