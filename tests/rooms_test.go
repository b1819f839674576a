package tests

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/ragsync/ragsync/"

// roomsDoc is the design note whose import table this test enforces.
const roomsDoc = "../docs/design/20261202-rooms.md"

// allowedImports reads the "Allowed imports" table of the rooms note: each
// row is a package and the project packages it may import directly.
func allowedImports(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(roomsDoc)
	require.NoError(t, err)
	defer f.Close()
	row := regexp.MustCompile("^\\| `([^`]+)` \\| (.*) \\|$")
	name := regexp.MustCompile("`([^`]+)`")
	allowed := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Allowed imports between the project's packages"
			continue
		}
		m := row.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		require.NotContains(t, allowed, m[1], "%s lists %s twice", roomsDoc, m[1])
		allowed[m[1]] = []string{}
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			allowed[m[1]] = append(allowed[m[1]], n[1])
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, allowed, "%s has no import table", roomsDoc)
	return allowed
}

// notARoom is what the table leaves out: benchmarks, examples and their
// helpers are not part of the service.
func notARoom(pkg string) bool {
	return strings.HasPrefix(pkg, "bench/") || strings.HasPrefix(pkg, "examples/")
}

// TestImportsFollowTheRooms: every package of the module is in the rooms
// note's import table, imports only the project packages its row allows,
// and no library package depends, even indirectly, on the command or the
// composition root (checked with go list -deps).
func TestImportsFollowTheRooms(t *testing.T) {
	allowed := allowedImports(t)
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "../...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		if notARoom(pkg) {
			continue
		}
		seen[pkg] = true
		may, ok := allowed[pkg]
		require.True(t, ok, "package %s is not in %s's import table: add its row", pkg, roomsDoc)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			require.True(t, slices.Contains(may, imp), "%s imports %s, which its row in %s does not allow", pkg, imp, roomsDoc)
		}
	}
	for pkg := range allowed {
		require.True(t, seen[pkg], "%s lists %s, which is not a package of the module", roomsDoc, pkg)
	}

	// Nothing below the composition root reaches it or the command.
	out, err = exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../sink", "../pipeline", "../cdc/...", "../embedder", "../monitor", "../fallback", "../backfill").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, module+"cmd/ragsync", dep)
		require.NotEqual(t, module+"service", dep)
	}
}
