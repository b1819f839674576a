package tests

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// backfillWorld is a source table in its own schema and a config writer
// for indexes in schemas of their own, all dropped at cleanup.
type backfillWorld struct {
	t      *testing.T
	dir    string
	src    string // source schema
	srv    *openaitest.Server
	conn   *pgx.Conn
	rows   int
	chunks int // chunks per document, at most
}

func uniqueName(prefix string) string {
	var b [5]byte
	_, _ = crand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func newBackfillWorld(t *testing.T, rows int) *backfillWorld {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: needs Postgres; skipped under -short")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	w := &backfillWorld{t: t, dir: t.TempDir(), src: uniqueName("bfsrc_"), srv: openaitest.New(t, openaitest.Options{}), conn: conn, rows: rows, chunks: 3}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+w.src+" CASCADE")
		conn.Close(context.Background())
	})
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+w.src+"; CREATE TABLE "+w.src+".articles (id int PRIMARY KEY, title text, body text)")
	require.NoError(t, err)
	// Three paragraphs a document, each its own chunk at target_tokens 30.
	_, err = conn.Exec(ctx, `INSERT INTO `+w.src+`.articles
		SELECT g, 'Title '||g, 'First paragraph of article '||g||' about subject '||(g % 17)||' with enough words to make one chunk of its own.'||E'\n\n'||
			'Second paragraph of article '||g||' going on about subject '||(g % 13)||' at a similar length for a second chunk.'||E'\n\n'||
			'Third and last paragraph of article '||g||' that closes subject '||(g % 11)||' and ends the document here.'
		FROM generate_series(1, $1) g`, rows)
	require.NoError(t, err)
	return w
}

// config writes a config for an index in a new schema and returns its path
// and the schema.
func (w *backfillWorld) config() (string, string) {
	w.t.Helper()
	schema := uniqueName("bfix_")
	w.t.Cleanup(func() {
		_, _ = w.conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	path := filepath.Join(w.dir, schema+".yaml")
	cfg := fmt.Sprintf(`tables:
  - match: %s.articles
    text: "# {{title}}\n\n{{body}}"
chunker:
  strategy: greedy
  target_tokens: 30
  min_tokens: 10
  max_tokens: 60
embedder:
  provider: openai
  base_url: %s
  model: text-embedding-3-small
  dimensions: 32
  api_key: sk-test
postgres:
  url: %s
  schema: %s
backfill:
  source_url: %s
index: articles
http:
  listen: ""
`, w.src, w.srv.URL, pgtest.URL(), schema, pgtest.URL())
	require.NoError(w.t, os.WriteFile(path, []byte(cfg), 0o644))
	return path, schema
}

// documents renders a schema's live documents with their chunk hashes.
func (w *backfillWorld) documents(schema string) map[string]string {
	w.t.Helper()
	rows, err := w.conn.Query(context.Background(), fmt.Sprintf(`SELECT d.id, coalesce(string_agg(c.content_hash, ',' ORDER BY c.position), '')
		FROM %[1]s.documents d LEFT JOIN %[1]s.chunks c ON c.index_name = d.index_name AND c.doc_id = d.id
		WHERE d.deleted_at IS NULL GROUP BY d.id`, schema))
	require.NoError(w.t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, h string
		require.NoError(w.t, rows.Scan(&id, &h))
		out[id] = h
	}
	require.NoError(w.t, rows.Err())
	return out
}

// progressed returns a channel closed extra after the schema's backfill
// checkpoint moves past *last (which it then updates): the process being
// killed has committed at least one page in this run.
func (w *backfillWorld) progressed(schema string, last *int64, extra time.Duration) <-chan time.Time {
	w.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var n int64
		err := w.conn.QueryRow(context.Background(), "SELECT coalesce(max(rows_read), 0) FROM "+schema+".backfill_checkpoints").Scan(&n)
		if err == nil && n > *last {
			*last = n
			return time.After(extra)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.t.Fatal("backfill made no progress in 2 minutes")
	return nil
}

// TestBackfillSIGKILLResume kills `ragsync backfill` with SIGKILL at random
// moments, at least five times, resuming each time. The final index equals
// a clean run's, and the embedding inputs sent exceed a clean run's by at
// most the pages in flight at the kills.
func TestBackfillSIGKILLResume(t *testing.T) {
	const rows, pageRows = 400, 10
	w := newBackfillWorld(t, rows)

	cleanCfg, cleanSchema := w.config()
	out, err := ragsyncCmd("backfill", "--config", cleanCfg, "--page-rows", fmt.Sprint(pageRows)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("backfill: %d rows read", rows))
	require.Contains(t, string(out), "bulk load", "an empty index takes the bulk path")
	require.Contains(t, string(out), "HNSW index built")
	cleanInputs := w.srv.Inputs.Load()
	want := w.documents(cleanSchema)
	require.Len(t, want, rows)
	var hnsw bool
	require.NoError(t, w.conn.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'chunks_hnsw_articles')", cleanSchema).Scan(&hnsw))
	require.True(t, hnsw, "the bulk path builds the HNSW index at the end")

	// The streaming path loads the same index.
	streamCfg, streamSchema := w.config()
	out, err = ragsyncCmd("backfill", "--config", streamCfg, "--page-rows", fmt.Sprint(pageRows), "--bulk", "off").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "bulk load")
	require.Equal(t, want, w.documents(streamSchema), "bulk and streaming paths store the same chunks")
	cleanInputs = w.srv.Inputs.Load() - cleanInputs // the streaming run's own calls: its cache was empty too

	cfg, schema := w.config()
	before := w.srv.Inputs.Load()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills := 0
	var lastRows int64
	for attempt := 0; ; attempt++ {
		args := []string{"backfill", "--config", cfg, "--page-rows", fmt.Sprint(pageRows), "--rate", "120"}
		if attempt > 0 {
			args = append(args, "--resume")
		}
		cmd := ragsyncCmd(args...)
		logPath := filepath.Join(w.dir, fmt.Sprintf("run%d.log", attempt))
		f, err := os.Create(logPath)
		require.NoError(t, err)
		cmd.Stdout, cmd.Stderr = f, f
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if kills < 5 {
			select {
			case err := <-done:
				f.Close()
				b, _ := os.ReadFile(logPath)
				require.NoError(t, err, "%s", b)
				t.Logf("run %d finished before its kill", attempt)
			case <-w.progressed(schema, &lastRows, time.Duration(rng.IntN(400))*time.Millisecond):
				// Mid-stream: a page was checkpointed in this run, and the
				// kill lands at a random point after it.
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				err := <-done
				f.Close()
				var exit *exec.ExitError
				require.True(t, errors.As(err, &exit), "killed run: %v", err)
				kills++
				continue
			}
		} else {
			err := <-done
			f.Close()
			b, _ := os.ReadFile(logPath)
			require.NoError(t, err, "%s", b)
		}
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "backfill: ") {
			var n int
			_, err := fmt.Sscanf(string(b[strings.Index(string(b), "backfill: "):]), "backfill: %d rows read", &n)
			require.NoError(t, err)
			require.Less(t, n, rows, "a resumed run continues after its checkpoint instead of re-reading everything")
			require.Contains(t, string(b), "resuming backfill")
			break
		}
	}
	require.GreaterOrEqual(t, kills, 5)
	got := w.documents(schema)
	require.Equal(t, len(want), len(got))
	for id, h := range want {
		require.Equal(t, h, got[id], "document %s differs from a clean run's", id)
	}
	sent := w.srv.Inputs.Load() - before
	slack := int64(kills * pageRows * w.chunks)
	t.Logf("%d SIGKILLs; inputs sent: clean run %d, killed and resumed %d (allowed up to %d more)", kills, cleanInputs, sent, slack)
	require.GreaterOrEqual(t, sent, cleanInputs)
	require.LessOrEqual(t, sent, cleanInputs+slack, "re-reading committed pages must cost no embedding calls")
}

// TestBackfillSharesEmbeddingRequests: a 3,000-row backfill with the
// default settings sends at most one embedding request per 32 inputs, on
// the bulk path and on the streaming path, because the chunks of the rows
// in flight share requests (one request per row would be 3,000).
func TestBackfillSharesEmbeddingRequests(t *testing.T) {
	const rows = 3000
	w := newBackfillWorld(t, rows)
	for _, bulk := range []string{"auto", "off"} {
		cfg, schema := w.config()
		requests, inputs := w.srv.Requests.Load(), w.srv.Inputs.Load()
		out, err := ragsyncCmd("backfill", "--config", cfg, "--bulk", bulk, "--progress", "none").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Len(t, w.documents(schema), rows)
		// Less the start-up probe: one request of one input, before any row.
		requests, inputs = w.srv.Requests.Load()-requests-1, w.srv.Inputs.Load()-inputs-1
		t.Logf("--bulk %s: %d requests for %d inputs (1/%.1f)", bulk, requests, inputs, float64(inputs)/float64(requests))
		require.Equal(t, int64(rows*w.chunks), inputs, "every chunk embedded once")
		require.LessOrEqual(t, requests*32, inputs, "--bulk %s: at most one request per 32 inputs", bulk)
	}
}

// TestBackfillReconcilesThroughTheCLI: after rows are deleted while nothing
// streamed their deletes, a --dry-run counts the documents a full backfill
// would delete and deletes none, --no-reconcile and --where keep them, and
// a full backfill deletes them. The first run (an empty index: the bulk
// path) reconciles too, and finds nothing.
func TestBackfillReconcilesThroughTheCLI(t *testing.T) {
	w := newBackfillWorld(t, 30)
	cfg, schema := w.config()
	run := func(args ...string) string {
		t.Helper()
		out, err := ragsyncCmd(append([]string{"backfill", "--config", cfg, "--page-rows", "8"}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := run()
	require.Contains(t, out, "bulk load")
	require.Contains(t, out, "reconcile: 0 documents whose rows are gone deleted")
	require.Len(t, w.documents(schema), 30)

	_, err := w.conn.Exec(context.Background(), "DELETE FROM "+w.src+".articles WHERE id IN (4, 5)")
	require.NoError(t, err)
	out = run("--dry-run")
	require.Contains(t, out, "reconcile: 2 documents whose rows are gone would be deleted")
	require.Len(t, w.documents(schema), 30, "a dry run deletes nothing")
	out = run("--no-reconcile")
	require.Contains(t, out, "reconcile: off (--no-reconcile)")
	require.Len(t, w.documents(schema), 30)
	out = run("--where", "id > 0")
	require.Contains(t, out, "reconcile: 0 documents whose rows are gone deleted; 1 table(s) not reconciled (--where, or resumed from an earlier snapshot)")
	require.Len(t, w.documents(schema), 30, "--where never reconciles")

	out = run()
	require.Contains(t, out, "reconcile: 2 documents whose rows are gone deleted")
	docs := w.documents(schema)
	require.Len(t, docs, 28)
	require.NotContains(t, docs, w.src+".articles/4")
	require.NotContains(t, docs, w.src+".articles/5")
}
