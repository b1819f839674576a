package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

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

// syncBuffer is a bytes.Buffer safe to read while the command writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInspectStreams feeds inspect through a pipe that stays open, as
// `kcat -C -J | ragsync inspect` does: each message must be printed before
// the input ends.
func TestInspectStreams(t *testing.T) {
	pr, pw := io.Pipe()
	var out syncBuffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(pr)
	cmd.SetArgs([]string{"inspect"})
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()

	msg := func(id, lsn int) string {
		return fmt.Sprintf(`{"key":{"id":%d},"value":{"op":"c","after":{"id":%d,"body":"hi"},"source":{"connector":"postgresql","schema":"public","table":"t","lsn":%d}}}`+"\n", id, id, lsn)
	}
	for i := 1; i <= 2; i++ {
		_, err := io.WriteString(pw, msg(i, 40+i))
		require.NoError(t, err)
		want := fmt.Sprintf(`"doc_key":"%d"`, i)
		require.Eventually(t, func() bool { return strings.Contains(out.String(), want) }, 10*time.Second, 10*time.Millisecond,
			"message %d printed while the input is still open; output so far: %q", i, out.String())
	}
	select {
	case err := <-done:
		t.Fatalf("inspect returned before its input ended: %v", err)
	default:
	}
	require.NoError(t, pw.Close())
	require.NoError(t, <-done)
}

func TestInspectReportsReadErrors(t *testing.T) {
	old := inspectMaxLine
	inspectMaxLine = 1 << 10
	t.Cleanup(func() { inspectMaxLine = old })
	good := `{"key":{"id":1},"value":{"op":"c","after":{"id":1,"body":"hi"},"source":{"connector":"postgresql","schema":"public","table":"t","lsn":42}}}`
	in := good + "\n" + `{"op":"c","after":{"body":"` + strings.Repeat("x", 2<<10) + `"}}` + "\n" + good + "\n"
	out, err := runCLI(t, in, "inspect")
	require.ErrorContains(t, err, "read line 2: longer than 1024 bytes")
	require.Contains(t, out, `"doc_key":"1"`, "the message before the long line was printed")
	require.Contains(t, out, "Error: read line 2")
}

// TestInspectBrokenLineDoesNotSwallowTheRest: a truncated message that
// starts like a pretty-printed value is reported, and the next message is
// still decoded.
func TestInspectBrokenLineDoesNotSwallowTheRest(t *testing.T) {
	good := `{"key":{"id":2},"value":{"op":"c","after":{"id":2,"body":"hi"},"source":{"connector":"postgresql","schema":"public","table":"t","lsn":43}}}`
	out, err := runCLI(t, `{"op":"c","after":{"id":9001,`+"\n"+good+"\n", "inspect")
	require.ErrorContains(t, err, "1 message(s) failed to decode")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	require.Contains(t, lines[0], `"line":1`)
	require.Contains(t, lines[0], `"error"`)
	require.Contains(t, lines[1], `"doc_key":"2"`)
}
