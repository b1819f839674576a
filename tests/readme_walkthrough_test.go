package tests

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// readmeWalkthrough returns the lines of the first ```sh block under the
// README heading given whole ("### From a file of …").
func readmeWalkthrough(t *testing.T, heading string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	under, inBlock := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inBlock && line == "```":
			return lines
		case inBlock:
			lines = append(lines, line)
		case strings.HasPrefix(line, "#"):
			under = line == heading
		case under && line == "```sh":
			inBlock = true
		}
	}
	require.NoError(t, sc.Err())
	require.FailNow(t, "no ```sh block under the README heading", heading)
	return nil
}

// shellWords splits a command line as sh would for the walk-throughs'
// commands: words separated by spaces, "…" and '…' quoting, # starting a
// comment outside quotes. No expansion: the caller substitutes variables.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// walkthrough runs a README walk-through's lines in a directory of its own,
// as a reader would from a clone, with the test's Postgres, schema and
// source in place of the sample config's.
type walkthrough struct {
	t    *testing.T
	dir  string   // the reader's working directory
	set  []string // --set overrides appended to every ragsync command
	env  []string // extra environment (SOURCE_URL)
	src  string   // the source database's URL, for psql lines
	last string   // the output of the last ragsync command run
	// background holds the commands a line started with &, stopped at
	// cleanup unless stop stopped them first.
	background []*exec.Cmd
}

// ragsync builds a ragsync command from a README line's words (after
// "bin/ragsync"), with paths under examples/ taken from this clone.
func (w *walkthrough) ragsync(ctx context.Context, args []string) *exec.Cmd {
	args = append([]string(nil), args...)
	for i, a := range args {
		if strings.HasPrefix(a, "examples/") {
			args[i] = filepath.Join(repoRoot(w.t), a)
		}
	}
	for _, s := range w.set {
		args = append(args, "--set", s)
	}
	cmd := ragsyncCmdContext(ctx, args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), w.env...)
	return cmd
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	return root
}

// run executes the walk-through's lines in order. A line it cannot run
// fails the test, so the README and this test stay in step. A query is
// retried until done(output) holds (a change reaches the index within
// seconds, not at once).
func (w *walkthrough) run(lines []string, done func(out string) bool) {
	t := w.t
	t.Helper()
	ctx := t.Context()
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		words := shellWords(line)
		switch {
		case len(words) == 0:
		case line == "make build": // the binary under test stands in for bin/ragsync
		case words[0] == "export":
			// The test sets the variable itself (w.env), to its own source.
		case words[0] == "cat" && len(words) == 4 && words[1] == ">" && words[3] == "<<EOF":
			// cat > FILE <<'EOF' … EOF: the heredoc becomes FILE.
			var body []string
			for i++; i < len(lines) && lines[i] != "EOF"; i++ {
				body = append(body, lines[i])
			}
			require.Less(t, i, len(lines), "heredoc without EOF in %q", line)
			writeLines(t, filepath.Join(w.dir, words[2]), body...)
		case words[0] == "psql" && len(words) == 4 && words[1] == "$SOURCE_URL" && words[2] == "-c":
			w.psql(ctx, words[3])
		case words[0] == "bin/ragsync" && words[len(words)-1] == "&":
			// Not t.Context(): that ends before cleanup, and serve is
			// stopped with SIGTERM, as a reader would stop it.
			cmd := w.ragsync(context.Background(), words[1:len(words)-1])
			var logs strings.Builder
			cmd.Stdout, cmd.Stderr = &logs, &logs
			require.NoError(t, cmd.Start())
			w.background = append(w.background, cmd)
			t.Cleanup(func() {
				w.stop()
				t.Logf("%s logs:\n%s", line, logs.String())
			})
		case words[0] == "bin/ragsync" && words[1] == "query":
			var out string
			require.Eventually(t, func() bool {
				b, err := w.ragsync(ctx, words[1:]).CombinedOutput()
				out = string(b)
				return err == nil && done(out)
			}, 90*time.Second, 500*time.Millisecond, "%s never found the document: %s", line, out)
			w.last = out
		case words[0] == "bin/ragsync":
			b, err := w.ragsync(ctx, words[1:]).CombinedOutput()
			w.last = string(b)
			require.NoError(t, err, "%s: %s", line, b)
		default:
			require.FailNow(t, "the test cannot run this README walk-through line; teach it", line)
		}
	}
}

// stop stops the commands started in the background, with SIGTERM, and
// waits for them.
func (w *walkthrough) stop() {
	for _, cmd := range w.background {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	w.background = nil
}

// psql runs one -c statement of a walk-through against the source database.
func (w *walkthrough) psql(ctx context.Context, sql string) {
	t := w.t
	t.Helper()
	require.NotEmpty(t, w.src, "psql line in a walk-through without a source database")
	conn, err := pgx.Connect(ctx, w.src)
	require.NoError(t, err)
	defer conn.Close(ctx)
	if strings.HasPrefix(sql, "SHOW wal_level") {
		var level string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&level))
		require.Equal(t, "logical", level, "the walk-through says wal_level must be logical")
		return
	}
	_, err = conn.Exec(ctx, sql)
	require.NoError(t, err, sql)
}

// TestReadmeWalkthroughFile runs the README's file-source walk-through as
// written, with the sample config it names: the query that ends it finds
// the document the file created and never the one it deleted.
func TestReadmeWalkthroughFile(t *testing.T) {
	e := newEnv(t, "") // the schema, dropped at the end
	w := &walkthrough{t: t, dir: t.TempDir(), set: []string{
		"postgres.url=" + pgtest.URL(), "postgres.schema=" + e.schema, "http.listen=",
	}}
	lines := readmeWalkthrough(t, "### From a file of Debezium messages (JSON Lines)")
	w.run(lines, func(out string) bool { return strings.Contains(out, "public.articles/1") })
	first := strings.SplitN(strings.TrimSpace(w.last), "\n", 2)[0]
	require.Contains(t, first, "public.articles/1", "the first hit is the rotated-key article: %s", w.last)
	require.NotContains(t, w.last, "public.articles/2", "the deleted article never appears")
}

// TestReadmeWalkthroughPostgres runs the README's Postgres-source
// walk-through as written, against a source database of the test's own
// holding public.articles with one row: serve's first start loads that row
// (the initial load, no backfill), then streams the walk-through's INSERT,
// which the closing query finds. Then, as the README says to retire it,
// serve stops and slot drop removes the slot.
func TestReadmeWalkthroughPostgres(t *testing.T) {
	e := newEnv(t, "")
	src := sourceDatabase(t, e.schema+"_src", `CREATE TABLE public.articles (id serial PRIMARY KEY, title text NOT NULL, body text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO public.articles (title, body) VALUES ('Espresso', 'Grind fine and pull 36 g of espresso from 18 g of coffee in about 28 seconds.')`)
	slot := "rs_" + e.schema // slots are server-wide: one of the test's own
	t.Cleanup(func() { dropSlotWhenIdle(t, slot) })
	w := &walkthrough{t: t, dir: t.TempDir(), src: src, env: []string{"SOURCE_URL=" + src}, set: []string{
		"postgres.url=" + pgtest.URL(), "postgres.schema=" + e.schema, "http.listen=",
		"source.postgres.slot=" + slot, "source.postgres.publication=" + slot,
	}}
	lines := readmeWalkthrough(t, "### From Postgres (`source.kind: postgres`)")
	w.run(lines, func(out string) bool { return strings.Contains(out, "Rotating the API key") })

	// The row the table held before serve started came with the initial load.
	cfg := filepath.Join(repoRoot(t), "examples", "config", "postgres-direct.yaml")
	out, err := w.ragsync(t.Context(), []string{"query", "--config", cfg, "espresso grind"}).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "public.articles/1", "the initial load indexed the existing row")

	// Retire it as the README says: stop serve, then slot drop (which
	// waits while the stopped serve's walsender still holds the slot).
	w.stop()
	for i := 0; ; i++ {
		out, err := w.ragsync(t.Context(), []string{"slot", "drop", "--config", cfg}).CombinedOutput()
		if err == nil {
			break
		}
		require.Contains(t, string(out), "in use", "slot drop: %s", out)
		require.Less(t, i, 300, "the slot stayed in use")
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var slots int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots))
	require.Zero(t, slots, "slot drop removed the slot")
}

// dropSlotWhenIdle drops slot once no walsender holds it (serve has just
// been stopped), so the source database can be dropped after it.
func dropSlotWhenIdle(t *testing.T, slot string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("drop slot %s: %v", slot, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
