package tests

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/orphan"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestDemo runs the demo program against the built binary and checks that the
// three sample queries return the expected documents first and that the edit
// phase re-used unchanged chunks.
func TestDemo(t *testing.T) {
	t.Parallel() // own schema, files and cluster
	e := newEnv(t, "")
	// Built, then run itself rather than through `go run`, so that the
	// parent-death signal reaches the demo and not only the go command: a
	// test binary killed by its timeout leaves no demo behind. (The demo's
	// own serve runs with --once and ends when it has drained.)
	demo := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("go", "build", "-o", demo, "../examples/demo").CombinedOutput(); err != nil {
		t.Fatalf("build the demo: %v\n%s", err, out)
	}
	cmd := orphan.DieWithParent(exec.Command(demo, "--ragsync", bin, "--dir", "../examples/demo",
		"--postgres-url", pgtest.URL(), "--schema", e.schema))
	out, err := cmd.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(out), "<- expected"), "every sample query finds its document first")
	require.Regexp(t, `phase 2, edits and deletes:[\s\S]*unchanged \(kept, not re-embedded\) [1-9]`, string(out))
	// Unchanged chunks are not counted a second time as "reused".
	require.Regexp(t, `phase 2, edits and deletes:[\s\S]*no call for the [1-9][0-9]* unchanged and [0-9]+ moved chunks, nor for [0-9]+ new chunks`, string(out))
	require.Contains(t, string(out), "Scores around 0.2 are normal here")
}
