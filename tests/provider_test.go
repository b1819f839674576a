package tests

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// marker is a word only the culprit documents' one paragraph holds; the
// fake provider misbehaves on every request that carries it.
const marker = "quokkaflux"

// TestMisbehavingProvider runs serve --once over twelve documents against
// a provider that misbehaves on the one paragraph two of them share a word
// in: exactly those two are dead-lettered (or none, when the input is
// answered well once alone), the other ten are applied, serve drains and
// exits, and an oversized body is refused without being read whole.
func TestMisbehavingProvider(t *testing.T) {
	t.Parallel() // own schemas, files and fake servers
	culprits := []int{4, 9}
	for _, tc := range []struct {
		name  string
		fault func(pos int) openaitest.Fault
		// lost: the culprits are dead-lettered (else the narrowing ends
		// with them answered well alone).
		lost bool
	}{
		{"wrong length for one input", func(pos int) openaitest.Fault { return openaitest.Fault{Lengths: map[int]int{pos: 255}} }, true},
		{"zero vector for one input", func(pos int) openaitest.Fault { return openaitest.Fault{Fill: map[int]float32{pos: 0}} }, true},
		{"NaN vector for one input", func(pos int) openaitest.Fault {
			return openaitest.Fault{Fill: map[int]float32{pos: float32(math.NaN())}}
		}, true},
		{"short answer", func(int) openaitest.Fault { return openaitest.Fault{Short: 1} }, true},
		{"long answer", func(int) openaitest.Fault { return openaitest.Fault{Long: 2} }, true},
		{"padded answer", func(int) openaitest.Fault { return openaitest.Fault{Padded: 1} }, false},
		{"slow answer", func(int) openaitest.Fault { return openaitest.Fault{Delay: 400 * time.Millisecond} }, false},
		{"oversized body", func(int) openaitest.Fault { return openaitest.Fault{BodyBytes: 200 << 20} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := openaitest.New(t, openaitest.Options{Dimensions: 256})
			srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
				if i := slices.IndexFunc(r.Input, func(s string) bool { return strings.Contains(s, marker) }); i >= 0 {
					f := tc.fault(i)
					return &f
				}
				return nil
			})
			e := newEnv(t, "")
			events := filepath.Join(e.dir, "events.jsonl")
			var lines []string
			for id := 1; id <= 12; id++ {
				paras := []string{
					fmt.Sprintf("Article %d opens with a paragraph about harbour cranes and the tides that move them.", id),
					fmt.Sprintf("Article %d goes on about copper roofs that turn green over forty years of rain.", id),
				}
				if slices.Contains(culprits, id) {
					paras = append(paras, fmt.Sprintf("Article %d ends with the %s paragraph that the provider answers badly.", id, marker))
				}
				lines = append(lines, article{op: "c", id: id, lsn: int64(100 + id), title: fmt.Sprintf("Title %d", id), body: body(paras...)}.line())
			}
			writeLines(t, events, lines...)
			writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
			editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n", fmt.Sprintf(
				"embedder:\n  provider: openai\n  base_url: %s\n  model: text-embedding-3-small\n  dimensions: 256\n  api_key: sk-test\n  timeout: 5s\n  max_retries: 1\n", srv.URL))

			out, rss, err := runMeasured(t, e, "serve", "--once")
			if tc.lost {
				require.Error(t, err, "exit 3: drained, with dead letters")
				require.Equal(t, 3, err.(*exec.ExitError).ExitCode(), out)
			} else {
				require.NoError(t, err, out)
			}
			t.Logf("%s: %d requests, peak RSS %d MiB, %d body bytes written", tc.name, srv.Requests.Load(), rss>>20, srv.BodyWritten.Load())
			require.Less(t, rss, int64(256<<20), "peak RSS of serve (race build)")

			var wantApplied, wantDead []string
			for id := 1; id <= 12; id++ {
				key := fmt.Sprintf("public.articles/%d", id)
				if tc.lost && slices.Contains(culprits, id) {
					wantDead = append(wantDead, fmt.Sprintf(`{"id":%d}`, id))
				} else {
					wantApplied = append(wantApplied, key)
				}
			}
			require.Equal(t, wantApplied, storedDocs(t, e.schema))
			var dead []string
			letters, err := file.NewDeadLetterFile(events+".dlq.jsonl", "").List(t.Context(), 0)
			require.NoError(t, err)
			for _, d := range letters {
				dead = append(dead, string(d.Key))
				t.Logf("dead letter %s: %s: %s", d.Key, d.ErrorClass, d.ErrorMessage)
				require.Contains(t, d.ErrorMessage, "input ", "the reason names the input")
			}
			sort.Strings(dead)
			require.Equal(t, wantDead, dead)
			if tc.name == "oversized body" {
				// Without the cap the client read all 200 MiB of every such
				// answer (and held it: 1.44 GiB for ten documents).
				require.Less(t, srv.BodyWritten.Load(), int64(64<<20), "the body was read past the cap")
			}
		})
	}
}

// runMeasured runs ragsync with e's config and returns its output, its
// peak resident set and the exit error.
func runMeasured(t *testing.T, e *env, args ...string) (string, int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := ragsyncCmdContext(ctx, append(args, "--config", e.cfg)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(t, cmd.Start())
	// The child's own high-water mark (VmHWM), read while it runs: the
	// rusage of a finished child is no good here, because Go starts it with
	// vfork and Linux keeps the parent's high-water mark across that exec,
	// so a large test binary would be charged to serve.
	var peak atomic.Int64
	exited, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		path := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		for {
			if hwm := readVmHWM(path); hwm > peak.Load() {
				peak.Store(hwm)
			}
			select {
			case <-exited:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(exited)
	<-done
	require.NotErrorIs(t, context.Cause(ctx), context.DeadlineExceeded, "serve did not drain: %s", buf.String())
	return buf.String(), peak.Load(), err
}

// readVmHWM returns the VmHWM line of a /proc/PID/status file in bytes, 0
// when the process is gone.
func readVmHWM(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// storedDocs lists the live documents of schema's index.
func storedDocs(t *testing.T, schema string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT id FROM %s.documents WHERE deleted_at IS NULL`, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	sort.Slice(ids, func(i, j int) bool {
		var a, b int
		fmt.Sscanf(ids[i], "public.articles/%d", &a)
		fmt.Sscanf(ids[j], "public.articles/%d", &b)
		return a < b
	})
	return ids
}
