package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
)

// TestBulkBackfillKilledMidPagePaysOnlyInFlight SIGKILLs a bulk backfill of
// 3,000 rows in the middle of its first page (pages of 500 rows: nothing is
// flushed or checkpointed yet), resumes it, and counts the embedding inputs
// against a clean run's. Every answered embedding request is cached before
// its slot is freed, so the resumed run re-embeds only what was in flight
// at the kill, however many documents were still waiting for the index: at most max_requests_in_flight × max_batch_inputs inputs, and
// at most 5% more than a clean run.
func TestBulkBackfillKilledMidPagePaysOnlyInFlight(t *testing.T) {
	const rows, inFlight, batchInputs = 3000, 4, 64
	w := newBackfillWorld(t, rows)
	// Slow answers, so that the kill lands with requests in flight.
	w.srv.SetHook(func(openaitest.Request) *openaitest.Fault { return &openaitest.Fault{Delay: 5 * time.Millisecond} })
	limits := fmt.Sprintf("embedder:\n  max_requests_in_flight: %d\n  max_batch_inputs: %d\n", inFlight, batchInputs)
	config := func() (string, string) {
		path, schema := w.config()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		// The world's config has one embedder block: extend it.
		s := strings.Replace(string(b), "embedder:\n", limits, 1)
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
		return path, schema
	}

	cleanCfg, _ := config()
	before := w.srv.Inputs.Load()
	out, err := ragsyncCmd("backfill", "--config", cleanCfg, "--progress", "none").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "bulk load: HNSW index built in", "the summary includes the HNSW build")
	clean := w.srv.Inputs.Load() - before

	cfg, schema := config()
	before = w.srv.Inputs.Load()
	cmd := ragsyncCmd("backfill", "--config", cfg, "--progress", "none")
	logPath := filepath.Join(w.dir, "killed.log")
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	// Mid first page: a third of its 1,500 inputs embedded.
	deadline := time.Now().Add(2 * time.Minute)
	for w.srv.Inputs.Load()-before < 500 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	var exit *exec.ExitError
	require.True(t, errors.As(cmd.Wait(), &exit), "the backfill was still running at the kill")
	f.Close()
	atKill := w.srv.Inputs.Load() - before
	var checkpoints int
	require.NoError(t, w.conn.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".backfill_checkpoints WHERE rows_read > 0").Scan(&checkpoints))
	require.Zero(t, checkpoints, "the kill landed before the first page was flushed")

	out, err = ragsyncCmd("backfill", "--config", cfg, "--resume", "--progress", "none").CombinedOutput()
	require.NoError(t, err, "%s", out)
	total := w.srv.Inputs.Load() - before
	extra := total - clean
	t.Logf("inputs: clean run %d; killed run %d at the kill, %d in all after --resume: %d extra (%.3f×), bound %d", clean, atKill, total, extra,
		float64(total)/float64(clean), inFlight*batchInputs)
	require.LessOrEqual(t, extra, int64(inFlight*batchInputs), "a kill costs at most the requests in flight")
	require.LessOrEqual(t, float64(total), 1.05*float64(clean))
	require.Len(t, w.documents(schema), rows)
}
