package pgrepl_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
)

// TestPostgresSourceWatermark: the mark follows what was acknowledged,
// with the acknowledged transaction's commit time; an idle slot's mark
// then passes the position an application gets from pg_current_wal_lsn()
// after its COMMIT, even when later WAL carried nothing for the
// publication, and its time trails the server's clock by the slack.
func TestPostgresSourceWatermark(t *testing.T) {
	b := pgSetup(t)
	s := b.source(t, b.config())
	marks := func() []cdc.Mark {
		t.Helper()
		m, err := s.Marks(t.Context())
		require.NoError(t, err)
		return m
	}
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	pos := b.walLSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var batch cdc.Batch
	for len(batch.Records) == 0 {
		var err error
		batch, err = s.Fetch(ctx)
		require.NoError(t, err)
	}
	time.Sleep(300 * time.Millisecond) // probes and keepalives go and come meanwhile
	for _, m := range marks() {
		require.Less(t, m.Ord.Uint64(), batch.Records[0].Change.Version.Parts[0], "a mark before the change is acknowledged claims nothing of it")
	}
	require.NoError(t, batch.Ack(ctx))
	after, err := cdc.ParseAfter(cdc.LSNString(uint64(pos)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { ok, _ := after.Passed(marks(), nil); return ok }, 10*time.Second, 20*time.Millisecond,
		"the acknowledged commit's position is passed")
	m := marks()[0]
	require.Equal(t, cdc.PositionLSN, m.Kind)
	require.False(t, m.Commit.IsZero(), "the acknowledged transaction's commit time")
	require.WithinDuration(t, time.Now(), m.Commit, time.Minute)

	// WAL that carries nothing for the publication (another table) moves
	// an idle slot's mark past it.
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.other (id int)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.other VALUES (1)`, b.r.Schema))
	pos = b.walLSN(t)
	after, err = cdc.ParseAfter(cdc.LSNString(uint64(pos)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { ok, _ := after.Passed(marks(), nil); return ok }, 10*time.Second, 20*time.Millisecond,
		"an idle slot's mark follows the server's WAL")
	require.Eventually(t, func() bool {
		m := marks()[0]
		return m.CaughtUp && time.Since(m.Through) < 3*time.Second && time.Since(m.Through) >= 900*time.Millisecond
	}, 10*time.Second, 20*time.Millisecond, "an idle slot is through the server's time less the slack")
}
