package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// liveDocs counts the index's live documents.
func (e *reindexEnv) liveDocs() int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(context.Background(), "SELECT count(*) FROM documents WHERE deleted_at IS NULL").Scan(&n))
	return n
}

// TestBackfillNeverDeletesWhatItCannotSee runs the backfill as a user
// would: a role under a row-level security policy is refused before any
// read, naming the policy; a reconcile past --reconcile-max deletes
// nothing and prints the count and the keys (the dry run says the same);
// --yes lets it through.
func TestBackfillNeverDeletesWhatItCannotSee(t *testing.T) {
	e := newReindexEnv(t)
	ctx := context.Background()
	table := e.schema + ".src_notes"
	_, err := e.pool.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, body text NOT NULL); INSERT INTO "+table+
		" SELECT g, 'note number '||g||' about topic '||(g % 7) FROM generate_series(1, 20) g")
	require.NoError(t, err)
	backfill := func(url string, extra ...string) (string, error) {
		args := append([]string{"backfill", "--source-url", url, "--table", table, "--progress", "none"}, extra...)
		return runCLI(t, "", e.args(args...)...)
	}
	out, err := backfill(pgtest.URL())
	require.NoError(t, err, out)
	require.Equal(t, 20, e.liveDocs())

	// Row-level security: the role sees 3 of the 20 rows.
	_, err = e.pool.Exec(ctx, "ALTER TABLE "+table+" ENABLE ROW LEVEL SECURITY; CREATE POLICY tenant_only ON "+table+" USING (id <= 3)")
	require.NoError(t, err)
	url := readOnlyRole(t, e)
	out, err = backfill(url)
	require.ErrorContains(t, err, "row-level security filters what role")
	require.ErrorContains(t, err, "policies tenant_only")
	require.ErrorContains(t, err, "BYPASSRLS")
	require.ErrorContains(t, err, "--no-reconcile")
	require.Equal(t, 20, e.liveDocs(), "nothing deleted:\n%s", out)
	out, err = backfill(url, "--no-reconcile")
	require.NoError(t, err, out)
	require.Contains(t, out, "backfill: 3 rows read")
	require.Equal(t, 20, e.liveDocs())
	_, err = e.pool.Exec(ctx, "ALTER TABLE "+table+" DISABLE ROW LEVEL SECURITY")
	require.NoError(t, err)

	// 15 of 20 rows gone at once: past the default 10%.
	_, err = e.pool.Exec(ctx, "DELETE FROM "+table+" WHERE id > 5")
	require.NoError(t, err)
	out, err = backfill(pgtest.URL(), "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "reconcile: a real run would stop here: reconcile "+table+": would delete 15 of its 20 documents (75%), more than the limit 10%")
	out, err = backfill(pgtest.URL())
	require.ErrorContains(t, err, "would delete 15 of its 20 documents (75%), more than the limit 10%; nothing was deleted")
	require.ErrorContains(t, err, "--reconcile-max 15 or --yes")
	require.Equal(t, 20, e.liveDocs(), "nothing deleted:\n%s", out)
	out, err = backfill(pgtest.URL(), "--reconcile-max", "80%")
	require.NoError(t, err, out)
	require.Contains(t, out, "reconcile: 15 documents whose rows are gone deleted")
	require.Equal(t, 5, e.liveDocs())

	_, err = e.pool.Exec(ctx, "DELETE FROM "+table+" WHERE id > 1")
	require.NoError(t, err)
	out, err = backfill(pgtest.URL(), "--yes")
	require.NoError(t, err, out)
	require.Equal(t, 1, e.liveDocs())
	require.False(t, strings.Contains(out, "would stop"), out)
}

// movedEvent is a change of public.notes from connector dbserver1's
// database app at lsn, committed at ms.
func movedEvent(op string, id, lsn int, ms int64, body string) string {
	after := fmt.Sprintf(`{"id":%d,"body":%q}`, id, body)
	return fmt.Sprintf(`{"key":{"id":%d},"value":{"op":%q,"before":null,"after":%s,"source":{"connector":"postgresql","name":"dbserver1","db":"app","schema":"public","table":"notes","lsn":%d,"ts_ms":%d}}}`,
		id, op, after, lsn, ms)
}

// TestMovedDebeziumSourceIsNeverDroppedAsStale: a Debezium connector
// pointed at a restored database keeps its name, and the new server's
// positions restart far below the old one's. Its changes are not dropped
// as stale with exit 0: they are held back as dead letters whose reason
// names source.moves, serve --once exits with dead letters, and once the
// move is recorded the same changes apply.
func TestMovedDebeziumSourceIsNeverDroppedAsStale(t *testing.T) {
	e := newReindexEnv(t)
	t0 := int64(1_780_000_000_000)
	e.serve(movedEvent("c", 1, 9_000_000, t0, "Written on the old server."))

	dir := t.TempDir()
	events := filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(movedEvent("u", 1, 120, t0+600_000, "Edited on the new server.")+"\n"), 0o644))
	dlq := filepath.Join(dir, "dlq.jsonl")
	run := func(extra ...string) (string, error) {
		args := append([]string{"serve", "--once", "--set", "source.kind=file", "--set", "source.file.path=" + events, "--set", "dlq.path=" + dlq}, extra...)
		return runCLI(t, "", e.args(args...)...)
	}
	out, err := run()
	require.Error(t, err, "a change held back is not a clean drain:\n%s", out)
	var ec *exitError
	require.ErrorAs(t, err, &ec)
	require.Equal(t, ExitDeadLetters, ec.code, out)
	dead, err := os.ReadFile(dlq)
	require.NoError(t, err)
	require.Contains(t, string(dead), "the positions of source dbz:dbserver1/app went back")
	require.Contains(t, string(dead), "source.moves")
	require.Contains(t, e.docs("articles")["public.notes/1"], ";src=dbz:dbserver1/app", "the old server's document is untouched")
	before := e.docs("articles")["public.notes/1"]

	cfg := filepath.Join(dir, "ragsync.yaml")
	at := time.UnixMilli(t0 + 300_000).UTC().Format(time.RFC3339)
	require.NoError(t, os.WriteFile(cfg, []byte("source:\n  moves:\n    - source: dbz:dbserver1/app\n      at: "+at+"\n"), 0o644))
	out, err = run("--config", cfg)
	require.NoError(t, err, out)
	after := e.docs("articles")["public.notes/1"]
	require.NotEqual(t, before, after)
	require.Contains(t, after, ";epoch=1", "the new server's change is of the next epoch")
}
