package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// schemaExists says whether the index schema is there.
func (w pgWorld) schemaExists(t *testing.T) bool {
	t.Helper()
	var ok bool
	require.NoError(t, w.r.Conn.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", w.schema).Scan(&ok))
	return ok
}

// On a fresh install (no schema yet, then a migrated schema without an
// index) backfill --dry-run predicts documents, chunks, tokens and cost
// against an empty index, and creates nothing: no schema, no index row.
func TestDryRunPricesTheFirstBackfill(t *testing.T) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	w := newPGWorldIn(t, "test_fresh_"+hex.EncodeToString(b[:]))
	t.Cleanup(func() { _, _ = w.r.Conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+w.schema+" CASCADE") })
	for i := 1; i <= 3; i++ {
		w.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES ($1, $2, $3)`, w.r.Schema), i, fmt.Sprintf("Doc %d", i), fmt.Sprintf("Body number %d about tide pools.", i))
	}
	dry := []string{"backfill", "--dry-run", "--config", w.cfg, "--progress", "none", "--price-per-million-tokens", "1000"}
	line := `dry run: 3 documents, 3 chunks; to embed after the cache: 3 texts, [1-9][0-9]* tokens in [1-9][0-9]* calls\n`
	cost := `dry run: estimated cost 0\.0[0-9]+ at 1000 per million tokens\n`

	out, err := runCLI(t, "", dry...)
	require.NoError(t, err, out)
	require.Regexp(t, line, out)
	require.Regexp(t, cost, out)
	require.False(t, w.schemaExists(t), "a dry run created the schema:\n%s", out)

	out, err = runCLI(t, "", "migrate", "--config", w.cfg)
	require.NoError(t, err, out)
	out, err = runCLI(t, "", dry...)
	require.NoError(t, err, out)
	require.Regexp(t, line, out)
	require.Empty(t, w.indexes(t), "a dry run registered the index")
}
