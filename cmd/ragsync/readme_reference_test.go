package main

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// commandFlags lists every command of the tree under root by its path
// ("ragsync index promote") with the flags it defines itself (help
// excluded): the persistent flags of the root belong to "ragsync".
func commandFlags(root *cobra.Command) map[string][]string {
	out := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		flags := []string{}
		add := func(f *pflag.Flag) {
			if f.Name != "help" && !f.Hidden && !slices.Contains(flags, f.Name) {
				flags = append(flags, f.Name)
			}
		}
		c.LocalNonPersistentFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		sort.Strings(flags)
		if c.Runnable() || len(flags) > 0 { // a bare group ("index") has nothing to document
			out[c.CommandPath()] = flags
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root.InitDefaultCompletionCmd()
	walk(root)
	return out
}

// readmeReference parses the README's "## Command reference": a "### `ragsync
// …`" heading per command, each with a table of its flags and their
// purposes ("| `--flag` | purpose |", "(none)" when it takes none).
func readmeReference(t *testing.T) (map[string][]string, map[string]string) {
	t.Helper()
	f, err := os.Open("../../README.md")
	require.NoError(t, err)
	defer f.Close()
	cmds := map[string][]string{}
	purposes := map[string]string{} // "path --flag" -> purpose
	heading := regexp.MustCompile("^### `(ragsync[a-z -]*)`")
	row := regexp.MustCompile(`^\| ` + "`--([a-z0-9-]+)`" + `(?:[^|\\]|\\\|)* \| (.*) \|$`)
	in, cur := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Command reference"
			cur = ""
		case !in:
		case heading.MatchString(line):
			cur = strings.TrimSpace(heading.FindStringSubmatch(line)[1])
			require.NotContains(t, cmds, cur, "README lists %s twice", cur)
			cmds[cur] = []string{}
		case cur != "" && row.MatchString(line):
			m := row.FindStringSubmatch(line)
			cmds[cur] = append(cmds[cur], m[1])
			purposes[cur+" --"+m[1]] = strings.TrimSpace(m[2])
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, cmds, "README has no ## Command reference")
	for k := range cmds {
		sort.Strings(cmds[k])
	}
	return cmds, purposes
}

// TestReadmeReferenceMatchesHelp: every command of the binary is in the
// README's command reference with exactly the flags it takes, every
// command the reference names exists, and every flag has a purpose of its
// own (not --help's text pasted). Drift either way fails here.
func TestReadmeReferenceMatchesHelp(t *testing.T) {
	root := newRootCmd()
	want := commandFlags(root)
	got, purposes := readmeReference(t)
	for path := range got {
		require.Contains(t, want, path, "the README's command reference names %q, which does not exist", path)
	}
	for path, flags := range want {
		require.Contains(t, got, path, "command %q is missing from the README's command reference", path)
		require.Equal(t, flags, got[path], "flags of %q: the README's command reference against --help", path)
	}
	usage := map[string]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { usage[c.CommandPath()+" --"+f.Name] = f.Usage })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for key, purpose := range purposes {
		require.NotEmpty(t, purpose, "%s has no purpose in the README", key)
		require.NotEqual(t, usage[key], purpose, "%s: write the README's purpose for the reader, do not paste --help", key)
	}
}

// TestReadmeStandsAlone: the README names no file a reader of the
// repository does not have, and its first paragraph and the root --help
// both name the Postgres source.
func TestReadmeStandsAlone(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	require.False(t, strings.Contains(readme, "DESIGN.md"), "the README names DESIGN.md, which a reader of the repository does not have")
	first := strings.SplitN(strings.SplitN(readme, "\n\n", 3)[1], "\n## ", 2)[0]
	require.Contains(t, first, "logical replication", "the README's first paragraph names the Postgres source")
	require.Contains(t, newRootCmd().Long, "logical replication", "the root --help names the Postgres source")
}
