package tests

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// readmeCommands returns the README's "Using it" commands in order, each
// named by its subcommand plus the variant flags that change what it talks
// to (--via redis, --frontdoor).
func readmeCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var names []string
	inSection, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inSection = line == "## Using it"
		case inSection && strings.HasPrefix(line, "```"):
			if inBlock {
				return names
			}
			inBlock = true
		case inSection && inBlock:
			rest, ok := strings.CutPrefix(line, "bin/ragsync ")
			if !ok {
				continue
			}
			cmd, _, _ := strings.Cut(rest, "#")
			name := strings.Fields(cmd)[0]
			if strings.Contains(cmd, "--via redis") {
				name += " --via redis"
			}
			if strings.Contains(cmd, "--frontdoor") {
				name += " --frontdoor"
			}
			if strings.Contains(cmd, "--after") {
				name += " --after"
			}
			names = append(names, name)
		}
	}
	require.NoError(t, sc.Err())
	return names
}

// exitCodeOf is a finished command's exit status.
func exitCodeOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "ragsync did not run: %v", err)
	return ee.ExitCode()
}

// TestReadmeUsingIt walks the README's "Using it" commands in the README's
// order, as a script would: the built binary, a config in a temp dir with its
// own schema and Redis prefix, and for each command its exit code and the
// key line of its output. A command added to the README without a step
// here fails the test, so the two stay in step.
func TestReadmeUsingIt(t *testing.T) {
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events,
		article{op: "c", id: 1, lsn: 100, title: "Kayaking", body: body(kayak...), tenant: "acme"}.line(),
		article{op: "c", id: 2, lsn: 110, title: "Espresso", body: body(espresso...), tenant: "acme"}.line(),
		article{op: "c", id: 3, lsn: 120, title: "Gone", body: "A document deleted at once.", tenant: "acme"}.line(),
		article{op: "d", id: 3, lsn: 130}.line(),
		`{"topic":"dbserver1.public.articles","key":{"id":9},"value":"{not json"}`,
	)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "readme" + hex.EncodeToString(b[:])
	writeConfigSource(t, e, fmt.Sprintf(`source:
  kind: file
  file:
    path: %s
frontdoor:
  enabled: true
  redis_url: %s
  prefix: %s
`, events, redisURL(), prefix))

	// run returns the combined output and the exit code.
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := e.run(true, args...)
		return out, exitCodeOf(t, err)
	}
	steps := map[string]func(t *testing.T){
		"migrate": func(t *testing.T) {
			out, code := run("migrate")
			require.Equal(t, 0, code, out)
			require.Regexp(t, `schema `+e.schema+`: applied [1-9][0-9]* migration\(s\); it is now up to date`, out)
			out, code = run("migrate")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "schema "+e.schema+" is up to date; nothing to apply")
		},
		"serve": func(t *testing.T) {
			out, code := run("serve", "--once")
			require.Equal(t, 3, code, "dead letters exit 3: %s", out)
			require.Regexp(t, `(?m)^.*applied=4 .*dead_lettered=1`, out)
			require.Contains(t, out, "finished with 1 dead letter(s)")
			out, code = run("serve", "--once", "--lenient")
			require.Equal(t, 0, code, "--lenient: %s", out)
			require.Contains(t, out, "duplicate=3", "a replay applies nothing again")
			require.Contains(t, out, "stale=1", "the deleted document's create is older than its delete")
			require.NotContains(t, out, "chunks_cached", "and uses no cached chunk")
			out, code = run("serve", "--once", "--lenient", "--monitor")
			require.Equal(t, 0, code, "--monitor: %s", out)
			require.Regexp(t, `monitor checks=[1-9][0-9]* checks_failed=\d+ events=\d+ tokens=\d+`, out, "the monitor ran during the drain")
		},
		"query": func(t *testing.T) {
			out, code := run("query", "espresso grind size and water temperature", "-k", "5", "--tenant", "acme", "--table", "public.articles", "--json")
			require.Equal(t, 0, code, out)
			require.Regexp(t, `"doc_id":"public.articles/2","table":"public.articles","key":"2"`, out)
			require.NotContains(t, out, "public.articles/3", "a deleted document never appears")
		},
		"query --after": func(t *testing.T) {
			// serve --once read the file to its end: its watermark is past
			// line 3, so the wait ends at once.
			out, code := run("query", "--after", "3", "--after-timeout", "5s", "--tenant", "acme", "--json", "espresso grind size and water temperature")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, `"doc_id":"public.articles/2"`)
			// An LSN on an index a file feeds is never passed.
			out, code = run("query", "--after", "16/B374D848", "--after-timeout", "0", "--tenant", "acme", "--json", "espresso")
			require.Equal(t, 6, code, out)
			require.Contains(t, out, "not yet:")
			require.Contains(t, out, `{"status":"not_yet","after":"16/B374D848"`)
			require.NotContains(t, out, `"doc_id"`)
		},
		"query --via redis": func(t *testing.T) {
			serve := ragsyncCmd("serve", "--config", e.cfg)
			var logs strings.Builder
			serve.Stderr = &logs
			require.NoError(t, serve.Start())
			stopped := false
			defer func() {
				if !stopped {
					_ = serve.Process.Kill()
					_ = serve.Wait()
				}
				t.Logf("serve logs:\n%s", logs.String())
			}()
			var out string
			require.Eventually(t, func() bool {
				o, code := run("query", "--via", "redis", "--tenant", "acme", "--timeout", "3s", "espresso grind size and water temperature")
				out = o
				return code == 0 && strings.Contains(o, "public.articles/2")
			}, 60*time.Second, 300*time.Millisecond, "the front door never answered (a finite file must not stop it): %s", out)
			start := time.Now()
			out, code := run("query", "--via", "redis", "--tenant", "acme", "espresso grind size and water temperature")
			took := time.Since(start)
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "cached true")
			t.Logf("query --via redis (a process, cache hit) took %s", took)
			out, code = run("query", "--via", "redis", "--tenant", "acme", "--filter", "lang=en", "espresso")
			require.Equal(t, 1, code)
			require.Contains(t, out, "frontdoor.allowed_filters")

			require.NoError(t, serve.Process.Signal(syscall.SIGTERM))
			err := serve.Wait()
			stopped = true
			require.Equal(t, 0, exitCodeOf(t, err), "serve without --once exits 0 on SIGTERM")
		},
		"inspect": func(t *testing.T) {
			out, code := run("inspect", events)
			require.Equal(t, 1, code, "a message that fails to decode fails inspect: %s", out)
			require.Contains(t, out, `"op":"c"`)
			require.Contains(t, out, "1 message(s) failed to decode")
		},
		"dlq": func(t *testing.T) {
			out, code := run("dlq", "list")
			require.Equal(t, 0, code, out)
			require.Regexp(t, regexp.QuoteMeta(events+".dlq.jsonl:")+`1  from dbserver1.public.articles line 5 .*ragsync.cdc.DecodeError`, out)
			require.NotContains(t, out, "0001-01-01")
			out, code = run("dlq", "replay")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "replayed 4 record(s) to the end of "+events, "each of the four serve runs (--once, --lenient, --monitor, and the one stopped by SIGTERM) dead-lettered the broken line")
			out, code = run("dlq", "purge")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "purged 0 record(s)", "replay emptied the dead-letter file")
		},
		"dlq --frontdoor": func(t *testing.T) {
			out, code := run("dlq", "list", "--frontdoor")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "no dead letters")
		},
		"bloom": func(t *testing.T) {
			out, code := run("bloom", "rebuild")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "bloom filters rebuilt from 2 document(s)")
		},
		"purge": func(t *testing.T) {
			out, code := run("purge")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "purged 0 documents")
			out, code = run("purge", "--older-than", "0s")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "purged 1 documents")
			require.Contains(t, out, "documents deleted more than 0s ago")
		},
		"dupes": func(t *testing.T) {
			_, code := run("dupes", "--min-score", "80")
			require.Equal(t, 0, code)
		},
		"backfill": func(t *testing.T) {
			// The document database: a database of the test's own holding
			// public.articles, the table the config's tables[] names.
			srcURL := sourceDatabase(t, e.schema+"_src", `CREATE TABLE public.articles (id int PRIMARY KEY, title text, body text, tenant text, tags text);
				INSERT INTO public.articles VALUES
				(10, 'Tea', 'Green tea steeps at eighty degrees for two minutes; black tea takes boiling water.', 'acme', NULL),
				(11, 'Bread', 'A sourdough starter wants flour and water every day, and a warm kitchen.', 'acme', NULL)`)
			out, code := run("backfill", "--source-url", srcURL, "--table", "public.articles", "--dry-run", "--progress", "none")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "dry run: 2 documents")
			out, code = run("backfill", "--source-url", srcURL, "--table", "public.articles", "--progress", "none")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "backfill: 2 rows read")
			out, code = run("query", "how long does green tea steep", "-k", "3", "--tenant", "acme", "--json")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, `"doc_id":"public.articles/10"`, "a backfilled row is searchable")
		},
		"reindex": func(t *testing.T) {
			out, code := run("reindex", "--to", "articles_v2", "--dimensions", "64")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "reindex articles -> articles_v2")
		},
		"index": func(t *testing.T) {
			out, code := run("index", "list")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "articles_v2")
			require.Regexp(t, `articles_v2 .* caught-up`, out)
			require.Contains(t, out, "CHUNKS BY PROVENANCE")
			out, code = run("index", "status")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "articles")
			out, code = run("index", "promote", "articles_v2")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "alias articles -> articles_v2 (previous: articles)")
			// index: articles now resolves to articles_v2 (64 dimensions).
			out, code = run("query", "how long does green tea steep", "-k", "3", "--tenant", "acme", "--json")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, `"doc_id":"public.articles/10"`)
			out, code = run("index", "drop", "articles_v2")
			require.NotEqual(t, 0, code, out)
			require.Contains(t, out, "live target of alias articles")
			out, code = run("index", "rollback")
			require.Equal(t, 0, code, out)
			require.Contains(t, out, "alias articles -> articles (previous: articles_v2)")
			out, code = run("index", "drop", "articles_v2")
			require.Equal(t, 0, code, out)
			out, code = run("index", "list")
			require.Equal(t, 0, code, out)
			require.NotContains(t, out, "articles_v2")
		},
		"version": func(t *testing.T) {
			out, code := run("version")
			require.Equal(t, 0, code)
			require.Regexp(t, `^ragsync \S+`, out)
		},
	}
	names := readmeCommands(t)
	require.NotEmpty(t, names, "no commands found under the README's \"Using it\"")
	for _, name := range names {
		step, ok := steps[name]
		require.True(t, ok, "README command %q has no step in TestReadmeUsingIt", name)
		delete(steps, name)
		if !t.Run(name, step) {
			return // later commands build on earlier ones
		}
	}
	require.Empty(t, steps, "steps for commands the README no longer lists")
}

// sourceDatabase creates a database of the test's own (from template0, which
// nobody connects to, so parallel runs cannot block it), runs setup in it and
// returns its URL; the database is dropped when the test ends.
func sourceDatabase(t *testing.T, name, setup string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0")
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	cfg, err := pgx.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	u := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	src, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer src.Close(ctx)
	_, err = src.Exec(ctx, setup)
	require.NoError(t, err)
	return u
}
