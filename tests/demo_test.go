package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/orphan"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestDemo runs the demo program against the built binary and checks that the
// three sample queries return the expected documents first and that the edit
// phase re-used unchanged chunks. The demo writes to a schema of its own,
// named per run, and drops it at the end: two people running it against one
// database do not collide.
func TestDemo(t *testing.T) {
	t.Parallel() // own schema (the demo's), files and cluster
	// Built, then run itself rather than through `go run`, so that the
	// parent-death signal reaches the demo and not only the go command: a
	// test binary killed by its timeout leaves no demo behind. (The demo's
	// own serve runs with --once and ends when it has drained.)
	demo := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", demo, "../examples/demo").CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	cmd := orphan.DieWithParent(exec.Command(demo, "--ragsync", bin, "--dir", "../examples/demo",
		"--postgres-url", pgtest.URL()))
	out, err := cmd.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	m := regexp.MustCompile(`index in schema "(ragsync_demo_[0-9a-f]{8})"`).FindSubmatch(out)
	require.NotNil(t, m, "the demo names the schema of its own it writes to")
	schema := string(m[1])
	conn, cerr := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, cerr)
	t.Cleanup(func() {
		// Only if the demo failed to drop it.
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		conn.Close(context.Background())
	})
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(out), "<- expected"), "every sample query finds its document first")
	require.Regexp(t, `phase 2, edits and deletes:[\s\S]*unchanged \(kept, not re-embedded\) [1-9]`, string(out))
	// Unchanged chunks are not counted a second time as "reused".
	require.Regexp(t, `phase 2, edits and deletes:[\s\S]*no call for the [1-9][0-9]* unchanged and [0-9]+ moved chunks, nor for [0-9]+ new chunks`, string(out))
	require.Contains(t, string(out), "Scores around 0.2 are normal here")
	require.Contains(t, string(out), fmt.Sprintf("schema %q dropped", schema))
	var exists bool
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "the demo drops its schema at the end")
}
