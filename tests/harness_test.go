package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/orphan"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// bin is the ragsync binary built once for the package.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	// make test builds the binary before starting the tests: a cold -race
	// build of every dependency takes minutes on a busy machine, and inside
	// TestMain it counts against the package's -timeout.
	if b := os.Getenv("E2E_RAGSYNC_BIN"); b != "" {
		bin = b
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "ragsync-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "ragsync")
	build := exec.Command("go", "build", "-race", "-o", bin, "../cmd/ragsync")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build ragsync:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's isolated world: its own schema and config file.
type env struct {
	t      *testing.T
	dir    string
	schema string
	cfg    string
}

// newEnv creates a unique schema (dropped at cleanup) and writes a config
// whose source section is given by the caller.
func newEnv(t *testing.T, source string) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: needs Postgres; skipped under -short")
	}
	var b [5]byte
	_, _ = rand.Read(b[:])
	e := &env{t: t, dir: t.TempDir(), schema: "e2e_" + hex.EncodeToString(b[:])}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.URL())
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+e.schema+" CASCADE")
			conn.Close(context.Background())
		}
	})
	e.cfg = filepath.Join(e.dir, "ragsync.yaml")
	cfg := fmt.Sprintf(`%s
tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
    metadata: [tenant, tags]
    tenant: tenant
chunker:
  strategy: greedy
  target_tokens: 30
  min_tokens: 10
  max_tokens: 120
embedder:
  provider: hashing
  dimensions: 256
postgres:
  url: %s
  schema: %s
index: articles
http:
  listen: ""
`, source, pgtest.URL(), e.schema)
	require.NoError(t, os.WriteFile(e.cfg, []byte(cfg), 0o644))
	return e
}

// run executes ragsync with the env's config and returns stdout; stderr is
// logged. A non-zero exit fails the test unless allowFail.
func (e *env) run(allowFail bool, args ...string) (string, error) {
	e.t.Helper()
	args = append(args, "--config", e.cfg)
	cmd := ragsyncCmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if errb.Len() > 0 {
		e.t.Logf("ragsync %s stderr:\n%s", strings.Join(args, " "), errb.String())
	}
	if !allowFail {
		require.NoError(e.t, err, "ragsync %v", args)
	}
	return out.String() + errb.String(), err
}

// serveOnce runs serve --once and parses its summary.
func (e *env) serveOnce() map[string]int {
	e.t.Helper()
	out, err := e.run(true, "serve", "--once")
	// Exit 3 says "drained, with dead letters"; the callers check the
	// dead_lettered counter themselves.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) {
		require.NoError(e.t, err, "ragsync serve --once: %s", out)
	}
	stats := map[string]int{}
	for _, f := range strings.Fields(strings.SplitN(out, "\n", 2)[0]) {
		k, v, ok := strings.Cut(f, "=")
		if n, err := strconv.Atoi(v); ok && err == nil {
			stats[k] = n
		}
	}
	return stats
}

type hit struct {
	Rank  int     `json:"rank"`
	DocID string  `json:"doc_id"`
	Score float64 `json:"score"`
	Text  string  `json:"text"`
}

func (e *env) query(text string, extra ...string) []hit {
	e.t.Helper()
	args := append([]string{"query", "--json", "-k", "5", text}, extra...)
	if !slices.Contains(extra, "--tenant") {
		// The harness's index holds tenants' documents: a query that names
		// none asks for all of them on purpose.
		args = append(args, "--all-tenants")
	}
	out, _ := e.run(false, args...)
	var hits []hit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var h hit
		require.NoError(e.t, json.Unmarshal([]byte(line), &h), "query output line %q", line)
		hits = append(hits, h)
	}
	return hits
}

func docIDs(hits []hit) []string {
	var ids []string
	for _, h := range hits {
		ids = append(ids, h.DocID)
	}
	return ids
}

// article is a Debezium PostgreSQL change event for public.articles, as a
// payload-only JsonConverter value with its key.
type article struct {
	op     string
	id     int
	lsn    int64
	title  string
	body   string
	tenant string
}

func (a article) key() string { return fmt.Sprintf(`{"id":%d}`, a.id) }

func (a article) value() string {
	source := map[string]any{
		"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1700000000000 + a.lsn,
		"snapshot": "false", "db": "app", "schema": "public", "table": "articles", "txId": 500 + a.lsn, "lsn": a.lsn,
	}
	p := map[string]any{"op": a.op, "source": source, "ts_ms": 1700000000000 + a.lsn}
	if a.op == "d" {
		p["before"] = map[string]any{"id": a.id}
		p["after"] = nil
	} else {
		p["before"] = nil
		p["after"] = map[string]any{"id": a.id, "title": a.title, "body": a.body, "tenant": a.tenant, "tags": []string{"t"}}
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// line renders the event as a {"key":…,"value":…} JSON Lines entry.
func (a article) line() string {
	return fmt.Sprintf(`{"topic":"dbserver1.public.articles","key":%s,"value":%s}`, a.key(), a.value())
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
}

func getenv(k string) string { return os.Getenv(k) }

// ragsyncCmd is the ragsync binary under test with args, killed with the
// test binary (orphan.DieWithParent).
func ragsyncCmd(args ...string) *exec.Cmd { return orphan.DieWithParent(exec.Command(bin, args...)) }

// ragsyncCmdContext is ragsyncCmd, also killed when ctx ends.
func ragsyncCmdContext(ctx context.Context, args ...string) *exec.Cmd {
	return orphan.DieWithParent(exec.CommandContext(ctx, bin, args...))
}
