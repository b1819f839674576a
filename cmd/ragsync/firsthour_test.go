package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// eventLines renders messages as {"topic","key","value"} lines.
func eventLines(t testing.TB, msgs ...cdc.Record) string {
	t.Helper()
	var b strings.Builder
	for _, m := range msgs {
		line := map[string]any{"topic": m.Topic, "value": json.RawMessage(m.Value)}
		if m.Key != nil {
			line["key"] = json.RawMessage(m.Key)
		}
		raw, err := json.Marshal(line)
		require.NoError(t, err)
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}

func article(op string, id int, lsn int64, body string) cdc.Record {
	return debeziumtest.Message("articles", op, id, lsn, map[string]any{"title": fmt.Sprintf("Doc %d", id), "body": body})
}

// fileWorld is one test's events file and config, in its own schema.
type fileWorld struct {
	dir, events, cfg, schema string
}

func newFileWorld(t testing.TB, events string, extra string) fileWorld {
	t.Helper()
	_, schema := pgtest.Schema(t)
	dir := t.TempDir()
	w := fileWorld{dir: dir, events: filepath.Join(dir, "events.jsonl"), cfg: filepath.Join(dir, "ragsync.yaml"), schema: schema}
	require.NoError(t, os.WriteFile(w.events, []byte(events), 0o644))
	cfg := fmt.Sprintf(`source:
  kind: file
  file:
    path: %s
tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
embedder:
  provider: hashing
  dimensions: 64
postgres:
  url: %s
  schema: %s
index: firsthour
http:
  listen: ""
%s`, w.events, pgtest.URL(), schema, extra)
	require.NoError(t, os.WriteFile(w.cfg, []byte(cfg), 0o644))
	return w
}

// runCtx runs the CLI with ctx and returns stdout and stderr apart.
func runCtx(ctx context.Context, args ...string) (string, string, error) {
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), errb.String(), err
}

const (
	bodyA = "Tide pools hold anemones, hermit crabs and sea stars between the rocks at low water."
	bodyB = "A sourdough starter needs regular feeding with flour and water to stay lively."
)

// TestServeOnceExitCodes: serve --once exits 0 only when it drained its
// source without dead letters; dead letters, changes that match no
// configured table and a stop before draining each have their own code,
// and --lenient restores exit 0 for the first two.
func TestServeOnceExitCodes(t *testing.T) {
	good := eventLines(t, article("c", 1, 10, bodyA), article("c", 2, 20, bodyB))
	tests := []struct {
		name     string
		events   string
		extra    string
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "drained clean", events: good, wantCode: ExitOK},
		{name: "dead letters", events: good + "{not json\n" + `{"payload":{"op":"c"}}` + "\n", wantCode: ExitDeadLetters, wantErr: "finished with 2 dead letter(s)"},
		{name: "dead letters lenient", events: good + "{not json\n", args: []string{"--lenient"}, wantCode: ExitOK},
		{name: "empty file", events: "", wantCode: ExitOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newFileWorld(t, tc.events, tc.extra)
			out, _, err := runCtx(t.Context(), append([]string{"serve", "--once", "--config", w.cfg}, tc.args...)...)
			require.Equal(t, tc.wantCode, exitCode(err), "err: %v\nout: %s", err, out)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			}
		})
	}

	t.Run("nothing matched the configured tables", func(t *testing.T) {
		w := newFileWorld(t, good, "")
		cfg, err := os.ReadFile(w.cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(w.cfg, bytes.Replace(cfg, []byte("match: public.articles"), []byte("match: public.posts"), 1), 0o644))
		out, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
		require.Equal(t, ExitNothingMatched, exitCode(err), "err: %v", err)
		require.ErrorContains(t, err, "tables[].match")
		require.Contains(t, out, "unmatched_table=2")

		_, _, err = runCtx(t.Context(), "serve", "--once", "--lenient", "--config", w.cfg)
		require.NoError(t, err, "--lenient exits 0")
	})
}

// TestServeOnceStoppedBeforeDrainingExits5: a stop (the signal context
// ending) before the source is drained is not reported as a finished run.
// The source is a FIFO that stays open, so the run cannot drain by itself.
func TestServeOnceStoppedBeforeDrainingExits5(t *testing.T) {
	w := newFileWorld(t, "", "")
	require.NoError(t, os.Remove(w.events))
	require.NoError(t, syscall.Mkfifo(w.events, 0o644))
	writer := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(w.events, os.O_WRONLY, 0)
		if err != nil {
			writer <- nil
			return
		}
		_, _ = f.WriteString(eventLines(t, article("c", 1, 10, bodyA)))
		writer <- f
	}()
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() {
		_, _, err := runCtx(ctx, "serve", "--once", "--config", w.cfg)
		res <- err
	}()
	f := <-writer
	require.NotNil(t, f)
	// serve is reading the FIFO, which stays open: stop it there.
	require.Eventually(t, func() bool { return countDocs(t, w.schema) == 0 }, 30*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	cancel()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, f.Close()) // unblocks the read
	err := <-res
	require.Equal(t, ExitInterrupted, exitCode(err), "err: %v", err)
	require.ErrorContains(t, err, "stopped before the source was drained")
}

// countDocs counts the documents in schema, -1 before it is migrated.
func countDocs(t testing.TB, schema string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".documents").Scan(&n); err != nil {
		return -1
	}
	return n
}

// TestServeDoesNotTurnLaterSignalsIntoExit: once serve returned, a SIGINT
// to the process is none of its business any more (a leftover goroutine
// once exited 130 on it).
func TestServeDoesNotTurnLaterSignalsIntoExit(t *testing.T) {
	w := newFileWorld(t, eventLines(t, article("c", 1, 10, bodyA)), "")
	_, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.NoError(t, err)
	got := make(chan os.Signal, 1)
	signal.Notify(got, os.Interrupt)
	defer signal.Stop(got)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGINT not delivered")
	}
	time.Sleep(200 * time.Millisecond) // a leftover watcher would have exited the process by now
}

// TestServeBindsBeforeConsuming: a port in use fails serve before it reads
// a single change.
func TestServeBindsBeforeConsuming(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	w := newFileWorld(t, eventLines(t, article("c", 1, 10, bodyA), article("c", 2, 20, bodyB)), "")
	start := time.Now()
	_, _, err = runCtx(t.Context(), "serve", "--config", w.cfg, "--set", "http.listen="+ln.Addr().String())
	require.ErrorContains(t, err, "http.listen "+ln.Addr().String())
	require.ErrorContains(t, err, "choose a free address")
	require.Less(t, time.Since(start), 10*time.Second)
	require.Zero(t, countDocs(t, w.schema), "nothing was consumed")
}

// TestDLQOnFileSource: dlq list/replay/purge work on the file source's
// dead-letter file, which serve --once writes.
func TestDLQOnFileSource(t *testing.T) {
	w := newFileWorld(t, eventLines(t, article("c", 1, 10, bodyA))+"{not json\n", "")
	_, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.Equal(t, ExitDeadLetters, exitCode(err), "err: %v", err)

	out, _, err := runCtx(t.Context(), "dlq", "list", "--config", w.cfg)
	require.NoError(t, err, "dlq list on a file source must not ask for Kafka brokers")
	require.Contains(t, out, w.events+".dlq.jsonl:1  from (no topic) line 2")
	require.Contains(t, out, "ragsync.cdc.DecodeError")
	require.NotContains(t, out, "0001-01-01", "the dead letter's timestamp is not year 1")

	out, _, err = runCtx(t.Context(), "dlq", "list", "--json", "--config", w.cfg)
	require.NoError(t, err)
	var dl map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &dl))
	require.Equal(t, float64(2), dl["original_offset"])
	ts, err := time.Parse(time.RFC3339Nano, dl["timestamp"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), ts, time.Hour)

	out, _, err = runCtx(t.Context(), "dlq", "replay", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 record(s) to the end of "+w.events)
	out, _, err = runCtx(t.Context(), "dlq", "list", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "no dead letters")

	// The whole file again: the original broken line and its replayed
	// copy are dead-lettered again, then purged.
	_, _, err = runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.Equal(t, ExitDeadLetters, exitCode(err))
	out, _, err = runCtx(t.Context(), "dlq", "purge", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "purged 2 record(s)")
}

// TestPurgeZeroMeansNow: --older-than 0s purges every deleted document
// (0 used to mean the 720h default) and the output says the retention.
func TestPurgeZeroMeansNow(t *testing.T) {
	w := newFileWorld(t, eventLines(t, article("c", 1, 10, bodyA), article("c", 2, 20, bodyB), article("d", 1, 30, "")), "")
	_, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.NoError(t, err)

	out, _, err := runCtx(t.Context(), "purge", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "purged 0 documents", "the default retention keeps a document deleted just now")
	require.Contains(t, out, "documents deleted more than 720h0m0s ago")

	out, _, err = runCtx(t.Context(), "purge", "--older-than", "0s", "--keep-cache", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "purged 1 documents")
	require.Contains(t, out, "documents deleted more than 0s ago, cache kept (--keep-cache)")
	require.NotContains(t, out, "unused for kept")
	require.Equal(t, 1, countDocs(t, w.schema))
}

// TestQueryJSONCarriesTableAndKey: query --json has the protocol's fields.
func TestQueryJSONCarriesTableAndKey(t *testing.T) {
	w := newFileWorld(t, eventLines(t, article("c", 7, 10, bodyA)), "")
	_, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.NoError(t, err)
	out, _, err := runCtx(t.Context(), "query", "--json", "-k", "1", "--config", w.cfg, "tide pools")
	require.NoError(t, err)
	var hit map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &hit))
	require.Equal(t, "public.articles/7", hit["doc_id"])
	require.Equal(t, "public.articles", hit["table"])
	require.Equal(t, "7", hit["key"])
}

// TestMigrateSaysWhatItDid: the first migrate applies migrations and says
// so; the second has nothing to apply.
func TestMigrateSaysWhatItDid(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	schema := fmt.Sprintf("test_i16_migrate_%d", time.Now().UnixNano()%1_000_000_000)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.URL())
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(context.Background())
		}
	})
	args := []string{"migrate", "--postgres-url", pgtest.URL(), "--set", "postgres.schema=" + schema}
	out, _, err := runCtx(t.Context(), args...)
	require.NoError(t, err)
	require.Regexp(t, `^schema `+schema+`: applied [1-9][0-9]* migration\(s\); it is now up to date\n$`, out)
	out, _, err = runCtx(t.Context(), args...)
	require.NoError(t, err)
	require.Equal(t, "schema "+schema+" is up to date; nothing to apply\n", out)
}

// TestQueryJSONMarksReusedVectors: an edit that keeps its vector (a word
// removed from a long text) is marked vector_reused in query --json until
// the debt is repaid; serve --once leaves it for the next serve.
func TestQueryJSONMarksReusedVectors(t *testing.T) {
	var words []string
	for i := range 200 {
		words = append(words, fmt.Sprintf("tidepool%d", i%50), "anemone")
	}
	long := strings.Join(words, " ")
	edited := strings.Replace(long, "tidepool7 ", "", 1)
	w := newFileWorld(t, eventLines(t, article("c", 7, 10, long), article("u", 7, 11, edited)), "")
	out, _, err := runCtx(t.Context(), "serve", "--once", "--config", w.cfg)
	require.NoError(t, err)
	require.Contains(t, out, "chunks_reused=1")
	out, _, err = runCtx(t.Context(), "query", "--json", "-k", "1", "--config", w.cfg, "tidepool3 anemone")
	require.NoError(t, err)
	var hit map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &hit))
	require.Equal(t, true, hit["vector_reused"])
}

// TestIndexPromoteWithoutArgumentSaysWhatToPass: the refusal names the
// argument and how to list the indexes, not just a count of arguments.
func TestIndexPromoteWithoutArgumentSaysWhatToPass(t *testing.T) {
	for _, args := range [][]string{{"index", "promote"}, {"index", "promote", "a", "b"}} {
		_, _, err := runCtx(t.Context(), args...)
		require.Error(t, err)
		require.Contains(t, err.Error(), "the index to make live (NEW)")
		require.Contains(t, err.Error(), "ragsync index list --config <file>")
	}
}
