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
		return m.CaughtUp && time.Since(m.Through) < 2*time.Second && m.Through.After(m.Commit)
	}, 10*time.Second, 20*time.Millisecond, "an idle slot's time follows the server's clock")
	m = marks()[0]
	require.Greater(t, time.Since(m.Through), 90*time.Millisecond, "less the slack")
}

// TestPostgresSourceWatermarkAfterRestartClaimsNothingUnread: a slot that
// restarts behind the server (changes committed while ragsync was down)
// claims no time its unread changes were committed at, however long it
// goes without acknowledging them.
func TestPostgresSourceWatermarkAfterRestartClaimsNothingUnread(t *testing.T) {
	b := pgSetup(t)
	s := b.source(t, b.config())
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.fetch(t, s, 1, true)
	s.Close()
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))
	committed := time.Now()
	time.Sleep(1500 * time.Millisecond) // the server's clock moves on
	s = b.source(t, b.config())
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		ms, err := s.Marks(t.Context())
		require.NoError(t, err)
		for _, m := range ms {
			require.True(t, m.Through.Before(committed), "through %s claims a change committed at %s that was never acknowledged", m.Through, committed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := b.fetch(t, s, 1, true)
	if got[0].DocKey == "1" {
		// The first run's acknowledgement had not reached the server
		// when it stopped: the change comes again.
		got = b.fetch(t, s, 1, true)
	}
	require.Equal(t, "2", got[0].DocKey)
	require.Eventually(t, func() bool {
		ms, _ := s.Marks(t.Context())
		return len(ms) == 1 && ms[0].Through.After(committed)
	}, 10*time.Second, 20*time.Millisecond, "once acknowledged, the time passes it")
}
