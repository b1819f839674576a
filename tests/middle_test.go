package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
)

// The middle of the house stays a pure middle: these checks keep true what
// a reviewer would otherwise have to re-check by reading the whole tree.
// Each fails with the place that broke it.

// TestPipelineHasOneRequiredWriteContract: the pipeline writes through one
// target (an index with every method required, and its embedder); no
// optional write stage can come back, and a pipeline without a target is
// refused.
func TestPipelineHasOneRequiredWriteContract(t *testing.T) {
	st := reflect.TypeOf(pipeline.Stages{})
	for _, gone := range []string{"Decoder", "Sink", "Cache", "Lookup", "Commit", "Embedder", "Store"} {
		_, ok := st.FieldByName(gone)
		require.False(t, ok, "pipeline.Stages has an optional write stage %s again: write through Stages.Target", gone)
	}
	_, err := pipeline.New(pipeline.Config{}, pipeline.Stages{})
	require.ErrorContains(t, err, "has no index")
	require.ErrorContains(t, err, "has no embedder")

	src := goSources(t, "../pipeline", false)
	for path, text := range src {
		require.NotContains(t, text, "embedShadow", "%s: a shadow takes the primary's write path", path)
	}
}

// TestChangeHoldsTimeOnce: a change's commit time and snapshot flag live
// in its version only.
func TestChangeHoldsTimeOnce(t *testing.T) {
	ct := reflect.TypeOf(cdc.Change{})
	for i := range ct.NumField() {
		f := ct.Field(i)
		require.NotEqual(t, reflect.TypeOf(cdc.Version{}.Time()), f.Type, "cdc.Change.%s is a second copy of the version's time", f.Name)
		require.NotEqual(t, "Snapshot", f.Name, "cdc.Change.Snapshot is a second copy of Version.Snapshot")
	}
}

// TestNoJSONHandOver: no Debezium envelope is built from a row or a stored
// document to be decoded again; sources hand over changes. Only what plays
// a Debezium producer may write one: the demo, the benchmarks' event
// generators and the tests' helper.
func TestNoJSONHandOver(t *testing.T) {
	src := goSources(t, "..", false)
	envelope := regexp.MustCompile(`"op":[ \t]*("|[a-z])`)
	bad := matches(src, envelope, "../examples/", "../bench/", "../internal/debeziumtest/")
	require.Empty(t, bad, "these build a Debezium envelope: hand the pipeline a cdc.Change instead")
	require.NotEmpty(t, matches(src, envelope), "the check sees the envelopes it allows")
}

// TestOneRowReader: Postgres' text output is decoded into values in one
// place for table rows (cdc/pgsnap: the initial load, the backfill and the
// re-read of a row) and one for the replication stream.
func TestOneRowReader(t *testing.T) {
	src := goSources(t, "..", false)
	calls := regexp.MustCompile(`\bPostgresValue\(`)
	bad := matches(src, calls, "../cdc/pgsnap/", "../cdc/pgrepl/stream.go", "../cdc/postgres_value.go")
	require.Empty(t, bad, "these decode Postgres values their own way: read rows through cdc/pgsnap")
}

// TestApplyStaysSmall: the function that applies one document, and every
// function of the files that apply and write changes, stay small enough
// to read: at most 80 lines for the one that applies a document, and a
// cyclomatic complexity of at most 15 for each.
func TestApplyStaysSmall(t *testing.T) {
	fset := token.NewFileSet()
	for _, name := range []string{"apply.go", "write.go"} {
		f, err := parser.ParseFile(fset, filepath.Join("../pipeline", name), nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			require.LessOrEqual(t, cyclomatic(fn), 15, "%s: %s has a cyclomatic complexity over 15; split it", name, fn.Name.Name)
			if fn.Name.Name == "upsert" || fn.Name.Name == "prepare" {
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				require.LessOrEqual(t, lines, 80, "%s: %s is %d lines", name, fn.Name.Name, lines)
			}
		}
	}
}

// cyclomatic is 1 + the decision points of fn: if, for, range, case,
// && and ||, as gocyclo counts them.
func cyclomatic(fn *ast.FuncDecl) int {
	n := 1
	ast.Inspect(fn.Body, func(node ast.Node) bool {
		switch x := node.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			n++
		case *ast.CaseClause:
			if x.List != nil { // not default
				n++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				n++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				n++
			}
		}
		return true
	})
	return n
}

// TestComplexityCounterCounts: the counter above can fail.
func TestComplexityCounterCounts(t *testing.T) {
	src := `package p
func f(a, b bool, xs []int) int {
	if a && b { return 1 }
	for range xs {}
	switch { case a: ; case b: ; default: }
	return 0
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	require.NoError(t, err)
	require.Equal(t, 6, cyclomatic(f.Decls[0].(*ast.FuncDecl)))
}

// goSources reads the Go files under dir (recursively), tests included or
// not, by path.
func goSources(t *testing.T, dir string, tests bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != dir && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || (!tests && strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		out[path] = string(b)
		return err
	})
	require.NoError(t, err)
	require.NotEmpty(t, out, "no Go files under %s", dir)
	return out
}

// matches lists the files of src whose text matches re, outside the
// allowed paths (prefixes).
func matches(src map[string]string, re *regexp.Regexp, allowed ...string) []string {
	var out []string
	for path, text := range src {
		ok := false
		for _, a := range allowed {
			if strings.HasPrefix(path, a) {
				ok = true
			}
		}
		if !ok && re.MatchString(text) {
			out = append(out, path)
		}
	}
	return out
}
