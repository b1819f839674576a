package pgrepl_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// ownDBSetup is pgSetup in a database of the test's own, so that what a
// test says about every slot of the database holds whatever other tests
// run beside it.
func ownDBSetup(t *testing.T) *pgBundle {
	t.Helper()
	r := pgtest.ReplicationDatabase(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	return &pgBundle{r: r}
}

func (b *pgBundle) database(t *testing.T) string {
	t.Helper()
	var db string
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	return db
}

// dropSlotAtCleanup drops slot, a test's second slot, when the test ends,
// waiting for its consumer to let go of it; only in the test's own
// database, where every slot is the test's.
func (b *pgBundle) dropSlotAtCleanup(t *testing.T, slot string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for ctx.Err() == nil {
			_, err := b.r.Conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()", slot)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "55006" {
				if err != nil {
					t.Errorf("drop slot %s: %v", slot, err)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func (b *pgBundle) waitSlotActive(t *testing.T, slot string, active bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, slot)
		return err == nil && st.Exists && st.Active == active
	}, time.Minute, 50*time.Millisecond, "slot %s active=%v", slot, active)
}

func (b *pgBundle) publicationExists(t *testing.T, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&ok))
	return ok
}

// TestDropKeepsAPublicationAnotherSlotStreams: two deployments stream one
// publication, each from its own slot. Dropping the first one's slot keeps
// the publication while the second streams from it (its walsender names
// it), while the second's slot is idle and nothing says what it reads, and
// while a record says it reads it; the second keeps receiving changes.
// Once the second's slot is gone too, the publication goes.
func TestDropKeepsAPublicationAnotherSlotStreams(t *testing.T) {
	b := ownDBSetup(t)
	db := b.database(t)
	cfgA := b.config()
	stateA := pgrepl.NewMemoryState()
	cfgA.State = stateA
	b.source(t, cfgA).Close()

	slotB := b.r.Slot + "_b"
	b.dropSlotAtCleanup(t, slotB)
	cfgB := cfgA
	cfgB.Slot, cfgB.State = slotB, pgrepl.NewMemoryState()
	srcB := b.source(t, cfgB)
	b.waitSlotActive(t, slotB, true)
	b.waitSlotActive(t, b.r.Slot, false)

	dropped, err := pgrepl.Drop(t.Context(), cfgA, false)
	require.NoError(t, err)
	require.True(t, dropped.Slot)
	require.False(t, dropped.Publication, "a publication another slot streams from stays")
	require.Contains(t, dropped.PublicationKept, slotB)
	require.Contains(t, dropped.PublicationKept, "stream from it")
	require.Contains(t, dropped.PublicationKept, `DROP PUBLICATION "`+b.r.Publication+`"`)
	require.True(t, b.publicationExists(t, b.r.Publication))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	got := b.fetch(t, srcB, 1, true)
	require.Equal(t, cdc.OpCreate, got[0].Op, "the other deployment still streams")
	srcB.Close()
	b.waitSlotActive(t, slotB, false)

	// Idle, and nothing this deployment can see says what it reads.
	dropped, err = pgrepl.Drop(t.Context(), cfgA, false)
	require.NoError(t, err)
	require.Equal(t, pgrepl.Dropped{SlotName: b.r.Slot, PublicationName: b.r.Publication, PublicationKept: dropped.PublicationKept}, dropped)
	require.Contains(t, dropped.PublicationKept, "cannot tell whether replication slot(s) "+slotB)
	require.True(t, b.publicationExists(t, b.r.Publication))

	// Idle, and a record (the other deployment's) says it reads it.
	require.NoError(t, stateA.RecordStream(t.Context(), db, slotB, b.r.Publication))
	dropped, err = pgrepl.Drop(t.Context(), cfgA, false)
	require.NoError(t, err)
	require.Contains(t, dropped.PublicationKept, "stream from it")
	require.True(t, b.publicationExists(t, b.r.Publication))

	// The other deployment retires: its slot goes, not the publication it
	// did not create; then the first one's drop takes the publication.
	dropped, err = pgrepl.Drop(t.Context(), cfgB, false)
	require.NoError(t, err)
	require.Equal(t, pgrepl.Dropped{Slot: true, SlotName: slotB, PublicationName: b.r.Publication}, dropped)
	require.NoError(t, stateA.ForgetStream(t.Context(), db, slotB))
	dropped, err = pgrepl.Drop(t.Context(), cfgA, false)
	require.NoError(t, err)
	require.Equal(t, pgrepl.Dropped{Publication: true, SlotName: b.r.Slot, PublicationName: b.r.Publication}, dropped)
	require.False(t, b.publicationExists(t, b.r.Publication))
}

// TestDropNeverDropsASlotOfAnotherDatabase: slot names are server-wide; a
// slot of the configured name in another database is refused with that
// database's name, with --force too, and stays.
func TestDropNeverDropsASlotOfAnotherDatabase(t *testing.T) {
	b := ownDBSetup(t)
	other := b.database(t)
	b.r.Exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", b.r.Slot)
	cfg := b.config()
	cfg.URL = pgtest.URL() // the shared test database, not the slot's
	cfg.State = pgrepl.NewMemoryState()
	var here string
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&here))
	require.NotEqual(t, here, other)
	for _, force := range []bool{false, true} {
		_, err := pgrepl.Drop(t.Context(), cfg, force)
		require.Error(t, err, "force=%v", force)
		require.Contains(t, err.Error(), fmt.Sprintf("belongs to database %q, not to %q", other, here))
		require.Contains(t, err.Error(), "never drops another database's slot, with --force or without")
		require.Contains(t, err.Error(), fmt.Sprintf("connect to database %q and run SELECT pg_drop_replication_slot('%s')", other, b.r.Slot))
		require.NotContains(t, err.Error(), "run `ragsync slot drop --force`")
		st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, b.r.Slot)
		require.NoError(t, err)
		require.True(t, st.Exists, "force=%v: the other database's slot stays", force)
	}
}

// TestDefaultNamesComeFromTheIndexAndKeepWhatIsRecorded: with the slot and
// publication unset, a new deployment gets names derived from its index,
// while a deployment whose records show the legacy slot keeps it and its
// publication (an existing slot is never renamed).
func TestDefaultNamesComeFromTheIndexAndKeepWhatIsRecorded(t *testing.T) {
	b := ownDBSetup(t)
	db := b.database(t)
	cfg := b.config()
	cfg.Slot, cfg.Publication = "", ""
	cfg.DefaultName = pgrepl.DefaultName(b.r.Schema, "docs")
	b.dropSlotAtCleanup(t, cfg.DefaultName)
	b.dropSlotAtCleanup(t, pgrepl.LegacyName)
	b.source(t, cfg).Close()
	b.waitSlotActive(t, cfg.DefaultName, false)
	require.True(t, b.publicationExists(t, cfg.DefaultName), "a new deployment's publication is named for its index")
	dropped, err := pgrepl.Drop(t.Context(), cfg, true)
	require.NoError(t, err)
	require.Equal(t, cfg.DefaultName, dropped.SlotName)
	require.True(t, dropped.Slot)

	// A deployment from before derived names: its records show the legacy
	// slot and publication, which exist.
	_, err = b.r.Conn.Exec(t.Context(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", pgrepl.LegacyName)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42710" {
		t.Skipf("another slot named %s exists on this server", pgrepl.LegacyName)
	}
	require.NoError(t, err)
	b.r.Exec(t, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgrepl.LegacyName, b.table()))
	state := pgrepl.NewMemoryState()
	require.NoError(t, state.RecordCreated(t.Context(), pgrepl.KindSlot, db, pgrepl.LegacyName))
	require.NoError(t, state.RecordCreated(t.Context(), pgrepl.KindPublication, db, pgrepl.LegacyName))
	cfg.State = state
	b.source(t, cfg)
	b.waitSlotActive(t, pgrepl.LegacyName, true)
	st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, cfg.DefaultName)
	require.NoError(t, err)
	require.False(t, st.Exists, "no new slot beside the recorded one")
}

// TestSourceLogLinesNameEachAttributeOnce: the source's logger already
// carries the slot; no line repeats it.
func TestSourceLogLinesNameEachAttributeOnce(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	var logs syncBuffer
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := b.source(t, cfg)
	b.fetch(t, s, 1, true)
	s.Close()
	require.Contains(t, logs.String(), "initial load started")
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		require.Equal(t, 1, strings.Count(line, " slot="), line)
	}
}
