package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestInspect(t *testing.T) {
	in := strings.Join([]string{
		`{"key":{"id":1},"value":{"op":"c","after":{"id":1,"body":"hi"},"source":{"connector":"postgresql","schema":"public","table":"t","lsn":42}}}`,
		`{"topic":"x.public.t","key":{"id":1},"value":null}`,
		`not json at all`,
	}, "\n")
	out, err := runCLI(t, in, "inspect")
	require.ErrorContains(t, err, "1 message(s) failed to decode")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 3)
	require.Contains(t, lines[0], `"op":"c"`)
	require.Contains(t, lines[0], `"doc_key":"1"`)
	require.Contains(t, lines[0], `"table":"public.t"`)
	require.Contains(t, lines[1], `"skip":"tombstone"`)
	require.Contains(t, lines[2], `"line":3`)
	require.Contains(t, lines[2], `"error"`)
}

func TestInspectPrettyPrintedStream(t *testing.T) {
	in := "{\n  \"op\": \"d\",\n  \"before\": {\"id\": 7},\n  \"source\": {\"connector\": \"postgresql\", \"schema\": \"public\", \"table\": \"t\", \"lsn\": 9}\n}\n" +
		"{\n  \"op\": \"r\",\n  \"after\": {\"id\": 8},\n  \"source\": {\"connector\": \"postgresql\", \"schema\": \"public\", \"table\": \"t\", \"lsn\": 10}\n}\n"
	cfg := writeFile(t, "tables:\n  - match: public.t\n    id: [id]\n")
	out, err := runCLI(t, in, "inspect", "--config", cfg)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"op":"d"`)
	require.Contains(t, lines[1], `"op":"r"`)
}

func TestVersionAndHelp(t *testing.T) {
	out, err := runCLI(t, "", "version")
	require.NoError(t, err)
	require.Contains(t, out, "ragsync ")
	for _, sub := range []string{"serve", "query", "inspect", "migrate"} {
		out, err := runCLI(t, "", sub, "--help")
		require.NoError(t, err)
		require.Contains(t, out, "Examples:", "%s --help shows an example", sub)
	}
}

func TestQueryRejectsBadArguments(t *testing.T) {
	_, err := runCLI(t, "", "query", "  ")
	require.ErrorContains(t, err, "empty")
	_, err = runCLI(t, "", "query", "x", "-k", "0")
	require.ErrorContains(t, err, "out of range")
	_, err = runCLI(t, "", "query", "x", "--filter", "novalue")
	require.ErrorContains(t, err, "want key=value")
}
