package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestServeOnceMonitor: serve --once runs no monitor unless --monitor is
// given; with it, the monitor checks during the drain and the summary
// says how often. --monitor without --once is refused, naming the fix.
func TestServeOnceMonitor(t *testing.T) {
	_, schema := pgtest.Schema(t)
	var lines []string
	for i := 1; i <= 3; i++ {
		v := fmt.Sprintf(`{"op":"c","before":null,"after":{"id":%d,"title":"Title %d","body":"Body of article %d about tide pools"},`+
			`"source":{"connector":"postgresql","name":"dbserver1","db":"test","schema":"public","table":"articles","lsn":%d,"ts_ms":1700000000000},"ts_ms":1700000000000}`,
			i, i, i, 1000+i)
		lines = append(lines, fmt.Sprintf(`{"topic":"dbserver1.public.articles","key":{"id":%d},"value":%s}`, i, v))
	}
	events := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	args := append([]string{"serve", "--once", "--set", "source.kind=file", "--set", "source.file.path=" + events, "--set", "monitor.interval=1s"}, baseArgs(schema)...)

	out, err := runCLI(t, "", args...)
	require.NoError(t, err, out)
	require.NotContains(t, out, "monitor checks=", "no monitor with --once alone")

	out, err = runCLI(t, "", append(args, "--monitor")...)
	require.NoError(t, err, out)
	m := regexp.MustCompile(`monitor checks=(\d+) checks_failed=(\d+) events=(\d+) tokens=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "the summary reports the monitor: %s", out)
	checks, _ := strconv.Atoi(m[1])
	require.Positive(t, checks, "the monitor checks at start, then every monitor.interval")

	_, err = runCLI(t, "", "serve", "--monitor", "--postgres-url", pgtest.URL(), "--set", "postgres.schema="+schema)
	require.ErrorContains(t, err, "--monitor only applies with --once")
}
