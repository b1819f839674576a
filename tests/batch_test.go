package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// newBatchEnv is an env whose index articles holds n one-chunk documents
// embedded online by model src-model (16 dimensions) through a fake API
// that also serves the Batch API; reindexing them with --model tgt-model
// embeds n texts.
func newBatchEnv(t *testing.T, n int, opts openaitest.BatchOptions) (*env, *openaitest.Server) {
	t.Helper()
	e := newEnv(t, "")
	srv := openaitest.New(t, openaitest.Options{Dimensions: 16, Batch: opts})
	events := filepath.Join(e.dir, "events.jsonl")
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n", fmt.Sprintf(
		"embedder:\n  provider: openai\n  base_url: %s\n  model: src-model\n  dimensions: 16\n  api_key: sk-test\n  timeout: 10s\n  max_retries: 1\n"+
			"  max_batch_inputs: 100\n  batch:\n    poll_interval: 100ms\n    max_inputs_per_file: 1000\n", srv.URL))
	lines := make([]string, n)
	for i := range n {
		lines[i] = article{op: "c", id: i + 1, lsn: int64(10 + i), title: fmt.Sprintf("Note %d", i+1),
			body: fmt.Sprintf("Short text number %d about item %x.", i+1, i*7919), tenant: "acme"}.line()
	}
	writeLines(t, events, lines...)
	e.serveOnce()
	return e, srv
}

// chunkRow is one chunk of an index as a test compares it.
type chunkRow struct {
	DocID, Hash, Text, Embedding string
	Position                     int
}

func (e *env) chunkRows(index string) []chunkRow {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(e.t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT doc_id, position, content_hash, text, embedding::text FROM "+e.schema+
		".chunks WHERE index_name = $1 ORDER BY doc_id, position", index)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (chunkRow, error) {
		var c chunkRow
		return c, r.Scan(&c.DocID, &c.Position, &c.Hash, &c.Text, &c.Embedding)
	})
	require.NoError(e.t, err)
	return out
}

func (e *env) exec(sql string) int64 {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(e.t, err)
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(), strings.ReplaceAll(sql, "$schema", e.schema))
	require.NoError(e.t, err)
	return tag.RowsAffected()
}

func (e *env) count(sql string) int {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(e.t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(e.t, conn.QueryRow(context.Background(), strings.ReplaceAll(sql, "$schema", e.schema)).Scan(&n))
	return n
}

// requireSameChunks compares two indexes chunk by chunk: documents,
// positions, hashes, texts and vectors.
func requireSameChunks(t *testing.T, e *env, want, got string, n int) {
	t.Helper()
	w, g := e.chunkRows(want), e.chunkRows(got)
	require.Len(t, w, n)
	require.Len(t, g, len(w))
	for i := range w {
		require.Equal(t, w[i], g[i], "chunk %d", i)
	}
}

// TestBatchLaneReindexEqualsOnline: 10,000 texts reindexed through the
// Batch API give the index an online reindex gives, chunk for chunk and
// vector for vector, with no online embedding request.
func TestBatchLaneReindexEqualsOnline(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	const n = 10_000
	e, srv := newBatchEnv(t, n, openaitest.BatchOptions{Processing: 300 * time.Millisecond})
	e.run(false, "reindex", "--to", "v_online", "--model", "tgt-model")
	// The batch lane must embed everything itself: the online run's
	// vectors leave the cache.
	require.EqualValues(t, n, e.exec("DELETE FROM $schema.embedding_cache WHERE model = 'tgt-model'"))
	online := srv.Inputs.Load()
	out, _ := e.run(false, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Contains(t, out, fmt.Sprintf("batch lane: %d texts to embed after the cache; 10 batches created, 0 resumed; %d vectors cached from batches, 0 texts left to online requests", n, n))
	require.Equal(t, online, srv.Inputs.Load(), "no online request")
	c := srv.BatchCounts()
	require.Equal(t, 10, c.FilesUploaded)
	require.Equal(t, 10, c.BatchesCreated)
	require.Equal(t, 10, e.count("SELECT count(*) FROM $schema.embedding_batches WHERE status = 'applied' AND index_name = 'v_batch'"))
	requireSameChunks(t, e, "v_online", "v_batch", n)

	// A rerun finds every vector cached: nothing is submitted.
	out, _ = e.run(false, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Contains(t, out, "batch lane: 0 texts to embed after the cache; 0 batches created")
	require.Equal(t, 10, srv.BatchCounts().BatchesCreated)
}

// TestBatchLaneResumesAfterKill: a reindex --batch killed (SIGKILL) with
// batches created and one applied resumes on the next run from the
// recorded ids: no file is uploaded twice, no batch created twice, and
// the index equals the online one.
func TestBatchLaneResumesAfterKill(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	const n = 3000
	e, srv := newBatchEnv(t, n, openaitest.BatchOptions{Processing: 8 * time.Second})
	// The first batch is quick, the others take long: the kill comes
	// with one applied and the others running.
	srv.SetBatchHook(func(i int, _ []string) openaitest.BatchFault {
		if i == 0 {
			return openaitest.BatchFault{Processing: 200 * time.Millisecond}
		}
		return openaitest.BatchFault{}
	})
	e.run(false, "reindex", "--to", "v_online", "--model", "tgt-model")
	require.EqualValues(t, n, e.exec("DELETE FROM $schema.embedding_cache WHERE model = 'tgt-model'"))
	online := srv.Inputs.Load()

	cmd := ragsyncCmd("reindex", "--to", "v_batch", "--model", "tgt-model", "--batch", "--config", e.cfg)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for e.count("SELECT count(*) FROM $schema.embedding_batches WHERE status = 'applied'") < 1 {
		require.True(t, time.Now().Before(deadline), "no batch applied: %s", stderr.String())
		select {
		case err := <-exited:
			t.Fatalf("reindex ended before the kill: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err := <-exited
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 2, e.count("SELECT count(*) FROM $schema.embedding_batches WHERE batch_id IS NOT NULL AND applied_at IS NULL"), "two batches left running")
	require.Zero(t, e.count("SELECT count(*) FROM $schema.chunks WHERE index_name = 'v_batch'"), "killed in the batch lane, before the pass")

	c := srv.BatchCounts()
	require.Equal(t, 3, c.BatchesCreated)
	// The narrow windows a kill can also hit, made by hand: a file
	// uploaded whose id was not recorded yet, and a batch created whose id
	// was not. The rerun finds both at the provider (the file by its name,
	// the batch by its input file) instead of submitting them again.
	require.EqualValues(t, 1, e.exec("UPDATE $schema.embedding_batches SET input_file_id = NULL, batch_id = NULL, status = 'uploading'"+
		" WHERE id = (SELECT max(id) FROM $schema.embedding_batches)"))
	require.EqualValues(t, 1, e.exec("UPDATE $schema.embedding_batches SET batch_id = NULL, status = 'uploaded'"+
		" WHERE id = (SELECT max(id) - 1 FROM $schema.embedding_batches)"))
	// And a row whose upload never reached the provider: it is dropped,
	// its texts cut again with the others (here: none, all are covered).
	require.EqualValues(t, 1, e.exec("INSERT INTO $schema.embedding_batches (index_name, model, dimensions, file_name, status, hashes, line_inputs, inputs, tokens)"+
		" VALUES ('v_batch', 'tgt-model', 16, 'ghost.jsonl', 'uploading', '{nope}', '{1}', 1, 1)"))
	out, _ := e.run(false, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Contains(t, out, "0 batches created, 2 resumed")
	require.Equal(t, 1, e.count("SELECT count(*) FROM $schema.embedding_batches WHERE file_name = 'ghost.jsonl' AND status = 'abandoned' AND applied_at IS NOT NULL"))
	c = srv.BatchCounts()
	require.Equal(t, 3, c.FilesUploaded, "no file uploaded again")
	require.Equal(t, 3, c.BatchesCreated, "no batch created again")
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(c.UploadedContents))), 3, "no content submitted twice")
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(c.BatchInputFiles))), 3, "no file batched twice")
	require.Equal(t, online, srv.Inputs.Load(), "no online request")
	requireSameChunks(t, e, "v_online", "v_batch", n)
}

// TestBatchLaneFallsBackOnline: a failed request line and an expired
// batch leave their texts to online requests, which embed exactly those;
// a server without a Batch API fails the run naming the setting.
func TestBatchLaneFallsBackOnline(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	const n = 2500
	e, srv := newBatchEnv(t, n, openaitest.BatchOptions{})
	srv.SetBatchHook(func(i int, ids []string) openaitest.BatchFault {
		switch i {
		case 0:
			return openaitest.BatchFault{FailLines: ids[3:4]} // one request of 100 texts
		case 1:
			return openaitest.BatchFault{Expire: true} // 1000 texts
		}
		return openaitest.BatchFault{}
	})
	e.run(false, "reindex", "--to", "v_online", "--model", "tgt-model")
	require.EqualValues(t, n, e.exec("DELETE FROM $schema.embedding_cache WHERE model = 'tgt-model'"))
	online := srv.Inputs.Load()
	out, _ := e.run(false, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Contains(t, out, fmt.Sprintf("3 batches created, 0 resumed; %d vectors cached from batches, 1100 texts left to online requests", n-1100))
	require.EqualValues(t, 1100, srv.Inputs.Load()-online, "online requests for exactly what the batches did not give")
	require.Equal(t, 1, e.count("SELECT count(*) FROM $schema.embedding_batches WHERE status = 'expired' AND failed_inputs = 1000"))
	require.Equal(t, 1, e.count("SELECT count(*) FROM $schema.embedding_batches WHERE status = 'applied' AND failed_inputs = 100"))
	requireSameChunks(t, e, "v_online", "v_batch", n)
}

func TestBatchLaneWithoutBatchAPI(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	e, srv := newBatchEnv(t, 20, openaitest.BatchOptions{Disabled: true})
	online := srv.Inputs.Load()
	out, err := e.run(true, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Error(t, err)
	require.Contains(t, out, "has no Batch API")
	require.Contains(t, out, "embedder.batch.enabled: false")
	require.Equal(t, online, srv.Inputs.Load(), "nothing embedded online either")
}

// TestBatchLaneBackfill: a backfill --batch embeds every chunk through the
// Batch API (only the start-up probe goes online) and gives the index an
// online backfill gives; its dry run prices both lanes.
func TestBatchLaneBackfill(t *testing.T) {
	const rows = 400
	w := newBackfillWorld(t, rows)
	withBatch := func(cfg string) {
		b, err := os.ReadFile(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(cfg, []byte(strings.Replace(string(b), "  api_key: sk-test\n",
			"  api_key: sk-test\n  batch:\n    poll_interval: 100ms\n    max_inputs_per_file: 500\n", 1)), 0o644))
	}
	onlineCfg, onlineSchema := w.config()
	out, err := ragsyncCmd("backfill", "--config", onlineCfg, "--progress", "none").CombinedOutput()
	require.NoError(t, err, "%s", out)

	batchCfg, batchSchema := w.config()
	withBatch(batchCfg)
	out, err = ragsyncCmd("backfill", "--config", batchCfg, "--progress", "none", "--dry-run", "--price-per-million-tokens", "0.02").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "dry run: estimated cost 0.0005 at 0.02 per million tokens\n")
	require.Contains(t, string(out), "dry run: estimated cost with --batch 0.0003 at 0.01 per million tokens")

	inputs := w.srv.Inputs.Load()
	out, err = ragsyncCmd("backfill", "--config", batchCfg, "--progress", "none", "--batch").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), fmt.Sprintf("batch lane: %d texts to embed after the cache; 4 batches created, 0 resumed; %d vectors cached from batches, 0 texts left to online requests", rows*w.chunks, rows*w.chunks))
	require.EqualValues(t, 1, w.srv.Inputs.Load()-inputs, "only the start-up probe went online")
	require.Equal(t, 4, w.srv.BatchCounts().BatchesCreated, "requests of 256 texts (max_batch_inputs), at most 500 texts a file")
	rowsOf := func(schema string) []chunkRow {
		rs, err := w.conn.Query(context.Background(), "SELECT doc_id, position, content_hash, text, embedding::text FROM "+schema+
			".chunks ORDER BY doc_id, position")
		require.NoError(t, err)
		out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (chunkRow, error) {
			var c chunkRow
			return c, r.Scan(&c.DocID, &c.Position, &c.Hash, &c.Text, &c.Embedding)
		})
		require.NoError(t, err)
		return out
	}
	want, got := rowsOf(onlineSchema), rowsOf(batchSchema)
	require.Len(t, want, rows*w.chunks)
	require.Equal(t, want, got)
}

// startBatchReindex starts reindex --to v_batch --batch in the background
// and returns its stderr and a channel of its end.
func startBatchReindex(t *testing.T, e *env) (*exec.Cmd, *lockedBuffer, <-chan error) {
	t.Helper()
	cmd := ragsyncCmd("reindex", "--to", "v_batch", "--model", "tgt-model", "--batch", "--config", e.cfg)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return cmd, out, exited
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitBatches(t *testing.T, srv *openaitest.Server, n int, exited <-chan error, out *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for srv.BatchCounts().BatchesCreated < n {
		require.True(t, time.Now().Before(deadline), "no batch created")
		select {
		case err := <-exited:
			t.Fatalf("reindex ended early: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestBatchLaneRidesOutAnOutage: the provider's API failing while the
// batches run does not stop the run: it asks again at the next poll.
func TestBatchLaneRidesOutAnOutage(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	const n = 300
	e, srv := newBatchEnv(t, n, openaitest.BatchOptions{Processing: 1500 * time.Millisecond})
	e.run(false, "reindex", "--to", "v_online", "--model", "tgt-model")
	require.EqualValues(t, n, e.exec("DELETE FROM $schema.embedding_cache WHERE model = 'tgt-model'"))
	_, out, exited := startBatchReindex(t, e)
	waitBatches(t, srv, 1, exited, out)
	srv.FailNextBatchCalls(3, 503)
	require.NoError(t, <-exited, out.String())
	require.Contains(t, out.String(), "asking again at the next poll")
	require.Contains(t, out.String(), "1 batches created, 0 resumed; 300 vectors cached from batches, 0 texts left to online requests")
	requireSameChunks(t, e, "v_online", "v_batch", n)
}

// TestBatchLaneInterrupted: Ctrl-C while the batches run leaves them at
// the provider, says so with the command to run, and that command applies
// them without submitting them again.
func TestBatchLaneInterrupted(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	const n = 300
	e, srv := newBatchEnv(t, n, openaitest.BatchOptions{Processing: 3 * time.Second})
	cmd, out, exited := startBatchReindex(t, e)
	waitBatches(t, srv, 1, exited, out)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	require.Error(t, <-exited)
	require.Contains(t, out.String(), "batch lane interrupted: its batches keep running at the provider")
	require.Contains(t, out.String(), "ragsync reindex --to v_batch --batch")
	out2, _ := e.run(false, "reindex", "--to", "v_batch", "--model", "tgt-model", "--batch")
	require.Contains(t, out2, "0 batches created, 1 resumed; 300 vectors cached from batches")
	require.Equal(t, 1, srv.BatchCounts().BatchesCreated)
	require.Equal(t, 1, srv.BatchCounts().FilesUploaded)
}
