package pgrepl_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestPostgresSourceRefusesAMovedSource: when the slot's loads recorded
// another identity than the server answers with (a dump/restore, an
// upgrade, another server), a start is refused with the move named and the
// command that adopts it, before anything is streamed. Adopting it loads
// every table again, labelled with the new identity, and the record keeps
// the old identity as one the new source succeeds.
func TestPostgresSourceRefusesAMovedSource(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a'),(2,'two','b')`, b.table()))
	state := pgrepl.NewMemoryState()
	cfg := b.config()
	cfg.InitialLoad, cfg.State = true, state
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	loaded := b.fetch(t, s, 2, true)
	here := loaded[0].Version.Source
	require.Regexp(t, `^pg:\d+/`, here, "every version names the database's identity")
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (3,'three','c')`, b.table()))
	streamed := b.fetch(t, s, 1, true)
	require.Equal(t, here, streamed[0].Version.Source)
	s.Close()

	ctx := context.Background()
	rec, err := state.Load(ctx, b.r.Slot)
	require.NoError(t, err)
	require.Equal(t, here, rec.Source)
	const old = "pg:1/elsewhere"
	rec.Source = old
	require.NoError(t, state.SaveLoad(ctx, b.r.Slot, rec))

	_, err = pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "the source moved")
	require.ErrorContains(t, err, old)
	require.ErrorContains(t, err, "ragsync serve --adopt-source")

	cfg.AdoptMove = true
	s = b.source(t, cfg)
	again := b.fetch(t, s, 3, true)
	for _, ch := range again {
		require.Equal(t, cdc.OpRead, ch.Op, "an adopted move loads every row again")
		require.Equal(t, here, ch.Version.Source)
	}
	rec, err = state.Load(ctx, b.r.Slot)
	require.NoError(t, err)
	require.Equal(t, here, rec.Source)
	require.Equal(t, []string{old}, rec.Succeeds)
}

// TestPostgresSourceRefusesARowLevelSecurityLoad: an initial load read by
// a role under a row-level security policy would hold only the rows the
// policy shows (and its reconcile would delete the rest); the start is
// refused naming the policy and the fixes, before a slot is created.
func TestPostgresSourceRefusesARowLevelSecurityLoad(t *testing.T) {
	b := pgSetup(t)
	role := "r" + b.r.Slot
	ident := pgx.Identifier{role}.Sanitize()
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a'),(2,'two','b')`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, pgx.Identifier{b.r.Publication}.Sanitize(), b.table()))
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s ENABLE ROW LEVEL SECURITY; CREATE POLICY only_one ON %s USING (id = 1)`, b.table(), b.table()))
	b.r.Exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION; GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT ON %s TO %s`, ident, b.r.Schema, ident, b.table(), ident))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.URL())
		if err != nil {
			t.Errorf("drop role: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE %s", ident, ident)); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.User = url.User(role)
	cfg := b.config()
	cfg.URL, cfg.InitialLoad = u.String(), true
	_, err = pgrepl.New(t.Context(), cfg)
	var filtered *cdc.ErrFilteredRead
	require.ErrorAs(t, err, &filtered)
	require.ErrorContains(t, err, "only_one")
	require.ErrorContains(t, err, "BYPASSRLS")
	var slots int
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", b.r.Slot).Scan(&slots))
	require.Zero(t, slots, "nothing created")
}
