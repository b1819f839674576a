package service

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// transportNames are the source kinds a branch on the transport would
// compare against.
var transportNames = map[string]bool{"kafka": true, "file": true, "postgres": true, "redis-streams": true}

// TestNoBranchOnTheTransportOutsideItsTable: what differs between the
// transports (how a source opens, where its dead letters are, its health,
// lag and the advice a stall gives) is asked of one table, in service and
// in config. A branch on source.kind anywhere else in the Go sources of
// service, the command or config is how they drifted apart before (a
// stalled Postgres source was told to check the Kafka brokers), so this
// fails on one: a switch on a kind, a comparison of a kind with a
// transport's name, or a case of a transport's name in a switch on a
// kind.
func TestNoBranchOnTheTransportOutsideItsTable(t *testing.T) {
	var found []string
	for _, dir := range []string{".", "../config", "../cmd/ragsync"} {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			found = append(found, transportBranches(t, filepath.Join(dir, name))...)
		}
	}
	require.Empty(t, found, "branches on the source kind outside the transport tables (service/transports.go, config/source.go): ask the table instead")

	// The check itself finds each shape it looks for.
	src := filepath.Join(t.TempDir(), "x.go")
	require.NoError(t, os.WriteFile(src, []byte(`package x
func f(c struct{ Kind string }, kind string) {
	switch c.Kind {
	case "file":
	}
	if c.Kind == "kafka" {
	}
	if "postgres" != kind {
	}
	switch {
	case kind == "file":
	}
	switch via := kind; via {
	case "postgres":
	}
}
`), 0o644))
	require.Len(t, transportBranches(t, src), 4, "switch on a kind, two comparisons and a case comparison; a switch on another name is not a branch on the kind")
}

// transportBranches lists the branches on the transport kind in one file.
func transportBranches(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	require.NoError(t, err)
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SwitchStmt:
			if n.Tag != nil && namesKind(n.Tag) {
				report(n, "switch on the kind")
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			if (namesKind(n.X) && isTransportName(n.Y)) || (namesKind(n.Y) && isTransportName(n.X)) {
				report(n, "comparison of the kind with a transport's name")
			}
		}
		return true
	})
	return out
}

// namesKind says whether e is a kind: an identifier or field named kind
// or ending in Kind (not a call, such as reflect's Kind()).
func namesKind(e ast.Expr) bool {
	var name string
	switch e := e.(type) {
	case *ast.Ident:
		name = e.Name
	case *ast.SelectorExpr:
		name = e.Sel.Name
	default:
		return false
	}
	return name == "kind" || strings.HasSuffix(name, "Kind")
}

// isTransportName says whether e is the string literal of a transport.
func isTransportName(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	s, err := strconv.Unquote(lit.Value)
	return err == nil && transportNames[s]
}
