package sink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

func TestUnvacuumed(t *testing.T) {
	s, b := setup(t)
	ctx := context.Background()
	var serverOn bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT current_setting('autovacuum')::bool").Scan(&serverOn))
	const serverFix = "ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf()"
	// What the server setting alone gives for the tables other than chunks.
	others := func() []sink.Unvacuumed {
		if serverOn {
			return nil
		}
		return []sink.Unvacuumed{{Table: b.schema + ".documents", Fix: serverFix}, {Table: b.schema + ".embedding_cache", Fix: serverFix}}
	}

	got, err := s.Unvacuumed(ctx)
	require.NoError(t, err)
	if serverOn {
		require.Empty(t, got)
	} else {
		require.Equal(t, append([]sink.Unvacuumed{{Table: b.schema + ".chunks", Fix: serverFix, HNSW: true}}, others()...), got)
	}

	for _, opt := range []string{"false", "off", "0", "no", "FALSE"} {
		_, err = b.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.chunks SET (autovacuum_enabled = %s)", b.schema, opt))
		require.NoError(t, err)
		got, err = s.Unvacuumed(ctx)
		require.NoError(t, err)
		// Only chunks carries an HNSW index, so only its warning names one.
		chunks := sink.Unvacuumed{Table: b.schema + ".chunks", Fix: "ALTER TABLE " + b.schema + ".chunks RESET (autovacuum_enabled)", HNSW: true}
		require.Equal(t, append([]sink.Unvacuumed{chunks}, others()...), got, "autovacuum_enabled = %s", opt)
		_, err = b.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.chunks RESET (autovacuum_enabled)", b.schema))
		require.NoError(t, err)
	}
	_, err = b.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.documents SET (autovacuum_enabled = off)", b.schema))
	require.NoError(t, err)
	got, err = s.Unvacuumed(ctx)
	require.NoError(t, err)
	require.Contains(t, got, sink.Unvacuumed{Table: b.schema + ".documents", Fix: "ALTER TABLE " + b.schema + ".documents RESET (autovacuum_enabled)"},
		"documents has no HNSW index")
}
