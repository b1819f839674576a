package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// pgWorld is a Postgres source (its own table, slot and publication) and
// an index schema, with a config for both.
type pgWorld struct {
	r      *pgtest.Replica
	cfg    string
	schema string
}

// newPGWorld makes a pgWorld whose index schema is a migrated one of the
// test's own (pgtest.Schema).
func newPGWorld(t *testing.T) pgWorld {
	t.Helper()
	_, schema := pgtest.Schema(t)
	return newPGWorldIn(t, schema)
}

// newPGWorldIn makes a pgWorld whose index schema is schema, as it is.
func newPGWorldIn(t *testing.T, schema string) pgWorld {
	t.Helper()
	r := pgtest.Replication(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	path := writePGSourceConfig(t, r, schema, "")
	return pgWorld{r: r, cfg: path, schema: schema}
}

// writePGSourceConfig writes a config of the Postgres source r (its table
// articles) into index schema schema with the hashing embedder and no HTTP
// listener, plus extra top-level YAML, and returns its path.
func writePGSourceConfig(t *testing.T, r *pgtest.Replica, schema, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ragsync.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`source:
  kind: postgres
  postgres:
    url: %s
    slot: %s
    publication: %s
    application_name: %s
tables:
  - match: %s.articles
    text: "# {{title}}\n\n{{body}}"
embedder:
  provider: hashing
  dimensions: 16
postgres:
  url: %s
  schema: %s
index: articles
http:
  listen: ""
%s`, pgtest.URL(), r.Slot, r.Publication, r.App, r.Schema, pgtest.URL(), schema, extra)), 0o644))
	return path
}

// confirmed is the slot's confirmed_flush_lsn: how far the source moved.
func (w pgWorld) confirmed(t *testing.T) string {
	t.Helper()
	var lsn string
	require.NoError(t, w.r.Conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", w.r.Slot).Scan(&lsn))
	return lsn
}

// indexes lists the index rows of the world's schema.
func (w pgWorld) indexes(t *testing.T) []string {
	t.Helper()
	rows, err := w.r.Conn.Query(context.Background(), "SELECT name FROM "+w.schema+".indexes ORDER BY name")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// A typo in the index name beside an existing index is refused before the
// source is opened: serve exits non-zero with the nearest name, creates no
// index row and leaves the slot where it was, so the pending change still
// reaches the real index; backfill refuses the same way. --create-index
// creates a new index on purpose.
func TestTypoIndexNeverMovesTheSource(t *testing.T) {
	w := newPGWorld(t)
	w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (1, 'one', 'Tide pools hold anemones.')`, w.r.Schema))
	out, err := runCLI(t, "", "serve", "--once", "--config", w.cfg)
	require.NoError(t, err, out)
	require.Equal(t, []string{"articles"}, w.indexes(t))
	require.Equal(t, 1, countDocs(t, w.schema))

	w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (2, 'two', 'A sourdough starter needs flour.')`, w.r.Schema))
	before := w.confirmed(t)
	want := `no index or alias "articls" in schema ` + w.schema + ` (did you mean "articles"? known: articles); fix index: or --index; to start a new index beside them, run serve or backfill with --create-index`
	out, err = runCLI(t, "", "serve", "--once", "--config", w.cfg, "--index", "articls")
	require.EqualError(t, err, want, out)
	require.Equal(t, ExitFailure, exitCode(err))
	require.NotContains(t, out, "replication", "refused before the source was opened")
	require.Equal(t, before, w.confirmed(t), "the slot did not move")
	require.Equal(t, []string{"articles"}, w.indexes(t), "no index row created")

	out, err = runCLI(t, "", "backfill", "--config", w.cfg, "--index", "articls", "--progress", "none")
	require.EqualError(t, err, want, out)
	out, err = runCLI(t, "", "backfill", "--dry-run", "--config", w.cfg, "--index", "articls", "--progress", "none")
	require.EqualError(t, err, want, out)
	require.Equal(t, []string{"articles"}, w.indexes(t), "no index row created")

	// The real index still gets the pending change.
	out, err = runCLI(t, "", "serve", "--once", "--config", w.cfg)
	require.NoError(t, err, out)
	require.Equal(t, 2, countDocs(t, w.schema))

	// Asked for explicitly, a new index beside the others is created.
	out, err = runCLI(t, "", "backfill", "--config", w.cfg, "--index", "tickets", "--create-index", "--progress", "none")
	require.NoError(t, err, out)
	require.Equal(t, []string{"articles", "tickets"}, w.indexes(t))
}
