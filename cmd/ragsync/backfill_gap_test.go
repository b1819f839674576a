package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// Without a serve of the index, a backfill ends with a warning that the
// rows changed after its snapshot wait for a serve or another backfill;
// with serve running throughout (holding its serving lock), none.
func TestBackfillWarnsWithoutServe(t *testing.T) {
	w := newPGWorld(t)
	w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (1, 'one', 'Tide pools hold anemones.')`, w.r.Schema))
	backfill := []string{"backfill", "--config", w.cfg, "--progress", "none"}
	warning := `warning: no ragsync serve of index "articles" ran through this backfill: rows changed after its snapshot (at `
	out, err := runCLI(t, "", backfill...)
	require.NoError(t, err, out)
	require.Contains(t, out, warning)
	require.Contains(t, out, "start ragsync serve to apply them from the change stream")

	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		_, _, err := runCtx(ctx, "serve", "--config", w.cfg)
		served <- err
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-served)
	})
	pool, err := sink.OpenPool(t.Context(), pgtest.URL(), w.schema)
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		running, err := sink.NewCatalog(pool, w.schema).ServeRunning(t.Context(), "articles")
		return err == nil && running
	}, time.Minute, 50*time.Millisecond, "serve started")
	out, err = runCLI(t, "", backfill...)
	require.NoError(t, err, out)
	require.NotContains(t, out, "warning: no ragsync serve")
}

// A backfill that reuses a near-duplicate's vector (a word removed from a
// long row) repays that debt with an exact vector before it exits, so no
// borrowed vector waits for a serve that may never run.
func TestBackfillRepaysItsReuseDebt(t *testing.T) {
	w := newPGWorld(t)
	var words []string
	for i := range 200 {
		words = append(words, fmt.Sprintf("tidepool%d", i%50), "anemone")
	}
	long := strings.Join(words, " ")
	w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (7, 'Doc 7', $1)`, w.r.Schema), long)
	backfill := []string{"backfill", "--config", w.cfg, "--progress", "none"}
	out, err := runCLI(t, "", backfill...)
	require.NoError(t, err, out)

	w.r.Exec(t, fmt.Sprintf(`UPDATE %s.articles SET body = $1 WHERE id = 7`, w.r.Schema), strings.Replace(long, "tidepool7 ", "", 1))
	out, err = runCLI(t, "", backfill...)
	require.NoError(t, err, out)
	require.Contains(t, out, "chunks_reused=1", "the edit borrowed a vector")
	require.Contains(t, out, "reuse debt: 1 reused vectors replaced by exact ones")
	var debt int
	require.NoError(t, w.r.Conn.QueryRow(context.Background(), "SELECT count(*) FROM "+w.schema+".chunks WHERE debt_since IS NOT NULL").Scan(&debt))
	require.Zero(t, debt, "no reuse debt left behind")
}
