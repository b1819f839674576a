package redact_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoLoggerBypassesTheRedactor reads every non-test Go file of the module
// and fails on a log line that would not go through the redactor: slog's
// package-level functions (slog.Default's handler writes to stderr directly),
// the log package, and an http.Server without ErrorLog (net/http then prints
// with the log package). Components take a *slog.Logger that the commands
// build over the redacting writer.
func TestNoLoggerBypassesTheRedactor(t *testing.T) {
	root := moduleRoot(t)
	banned := map[string]bool{"Default": true, "SetDefault": true, "Debug": true, "Info": true, "Warn": true, "Error": true,
		"Log": true, "LogAttrs": true, "DebugContext": true, "InfoContext": true, "WarnContext": true, "ErrorContext": true}
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]string{} // local name -> import path
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			names[name] = p
			if p == "log" {
				found = append(found, fset.Position(im.Pos()).String()+": imports the log package")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && names[id.Name] == "log/slog" && banned[n.Sel.Name] {
					found = append(found, fset.Position(n.Pos()).String()+": slog."+n.Sel.Name+" uses the default logger")
				}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Server" {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || names[id.Name] != "net/http" {
					return true
				}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "ErrorLog" {
							return true
						}
					}
				}
				found = append(found, fset.Position(n.Pos()).String()+": http.Server without ErrorLog prints with the log package")
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "log lines that bypass the redactor")
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}
