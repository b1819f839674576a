package pgrepl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// exists reports whether the test's publication and slot exist.
func (b *pgBundle) exists(t *testing.T) (pub, slot bool) {
	t.Helper()
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2)`, b.r.Publication, b.r.Slot).Scan(&pub, &slot))
	return pub, slot
}

// TestSetupTouchesNothingUntilEveryCheckPassed: a table without a replica
// identity next to a good one fails the start, and nothing is created: no
// publication that would make Postgres refuse the application's UPDATE and
// DELETE on it, no slot holding WAL. The application's statements still
// work afterwards.
func TestSetupTouchesNothingUntilEveryCheckPassed(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.nokey (a int, b text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.nokey VALUES (1, 'x')`, b.r.Schema))
	cfg := b.config()
	cfg.Tables = append(cfg.Tables, cdc.TableConfig{Match: b.r.Schema + ".nokey"})
	_, err := pgrepl.New(t.Context(), cfg)
	require.Error(t, err)
	t.Log(err)
	require.ErrorContains(t, err, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", pgx.Identifier{b.r.Schema, "nokey"}.Sanitize()))
	require.ErrorContains(t, err, "would refuse the application's UPDATE and DELETE")
	pub, slot := b.exists(t)
	require.False(t, pub, "no publication was created")
	require.False(t, slot, "no slot was created")
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s.nokey SET b = 'y'`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s.nokey`, b.r.Schema))
}

// TestFailedStartUndoesWhatItCreated: when the slot cannot be created after
// the publication was, the publication is dropped again.
func TestFailedStartUndoesWhatItCreated(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.Slot = "Not-A-Valid-Slot" // passes the checks, refused by CREATE_REPLICATION_SLOT
	state := pgrepl.NewMemoryState()
	cfg.State = state
	_, err := pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "create replication slot")
	pub, _ := b.exists(t)
	require.False(t, pub, "the publication this start created is dropped again")
	created, _ := state.Created(t.Context(), pgrepl.KindPublication, "test", b.r.Publication)
	require.False(t, created)
}

// TestKeyChangeDeletesTheOldDocument: an UPDATE of the primary key is a
// delete of the old document and a create of the new one, as Debezium
// emits it, in that order and versioned in that order.
func TestKeyChangeDeletesTheOldDocument(t *testing.T) {
	b := pgSetup(t)
	s := b.source(t, b.config())
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET id = 2, body = 'b' WHERE id = 1`, b.table()))
	got := b.fetch(t, s, 3, true)
	require.Equal(t, []cdc.Op{cdc.OpCreate, cdc.OpDelete, cdc.OpCreate}, []cdc.Op{got[0].Op, got[1].Op, got[2].Op})
	require.Equal(t, []string{"1", "1", "2"}, []string{got[0].DocKey, got[1].DocKey, got[2].DocKey})
	require.Equal(t, "b", got[2].After["body"])
	require.Positive(t, got[2].Version.Compare(got[1].Version))
	require.Positive(t, got[1].Version.Compare(got[0].Version))
}

// TestReplicaIdentityMustCarryTheDocumentID: REPLICA IDENTITY USING INDEX
// on another column than the document id would send deletes without it:
// refused with the fix. With tables[].id naming the index's column, deletes
// and key changes find their document, in the stream and the load alike.
func TestReplicaIdentityMustCarryTheDocumentID(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.pages (id int PRIMARY KEY, slug text NOT NULL, body text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`CREATE UNIQUE INDEX pages_slug ON %s.pages (slug)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s.pages REPLICA IDENTITY USING INDEX pages_slug`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.pages VALUES (1, 'home', 'x')`, b.r.Schema))
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: b.r.Schema + ".pages"}}
	_, err := pgrepl.New(t.Context(), cfg)
	require.Error(t, err)
	t.Log(err)
	require.ErrorContains(t, err, "does not carry the document id column(s) id")
	require.ErrorContains(t, err, "REPLICA IDENTITY FULL")
	pub, slot := b.exists(t)
	require.False(t, pub || slot)

	cfg.Tables[0].ID = []string{"slug"}
	cfg.InitialLoad = true
	s := b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, "home", got[0].DocKey, "the load keys by tables[].id")
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s.pages SET slug = 'start' WHERE id = 1`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s.pages WHERE id = 1`, b.r.Schema))
	got = b.fetch(t, s, 3, true)
	var ops []string
	for _, ch := range got {
		if len(ch.Op) > 0 && ch.DocKey != "" {
			ops = append(ops, string(ch.Op)+":"+ch.DocKey)
		}
	}
	require.Equal(t, []string{"d:home", "c:start", "d:start"}, ops[len(ops)-3:])
}

// TestUnchangedToastComesFromTheFullOldRow: under REPLICA IDENTITY FULL an
// update that leaves a TOASTed column alone still carries its value (from
// the old row), so nothing is missing even without a stored document.
func TestUnchangedToastComesFromTheFullOldRow(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, b.table()))
	var sb strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&sb, "%08x", uint32(i)*2654435761)
	}
	s := b.source(t, b.config())
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 't', $1)`, b.table()), sb.String())
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET title = 'u' WHERE id = 1`, b.table()))
	got := b.fetch(t, s, 2, true)
	require.Equal(t, cdc.OpUpdate, got[1].Op)
	require.Empty(t, got[1].Unavailable)
	require.Equal(t, sb.String(), got[1].After["body"])
}

// TestUnchangedToastWithoutFullIsReported: with the default identity the
// column is reported unavailable (the pipeline keeps the stored value), and
// never handed over as the placeholder text.
func TestUnchangedToastWithoutFullIsReported(t *testing.T) {
	b := pgSetup(t)
	var sb strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&sb, "%08x", uint32(i)*2654435761)
	}
	s := b.source(t, b.config())
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 't', $1)`, b.table()), sb.String())
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET title = 'u' WHERE id = 1`, b.table()))
	got := b.fetch(t, s, 2, true)
	require.Equal(t, []string{"body"}, got[1].Unavailable)
	_, has := got[1].After["body"]
	require.False(t, has)
}

// TestResumedLoadCoversEveryTable: schema "s-x" sorts after "s" in
// Postgres (which lists the publication's tables by schema, then table) but
// "s-x.a" sorts before "s.z" as text. A load interrupted in s.z resumes
// with s-x.a too.
func TestResumedLoadCoversEveryTable(t *testing.T) {
	b := pgSetup(t)
	other := b.r.Schema + "-x"
	b.r.Exec(t, "CREATE SCHEMA "+pgx.Identifier{other}.Sanitize())
	t.Cleanup(func() {
		_, _ = b.r.Conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{other}.Sanitize()+" CASCADE")
	})
	z := pgx.Identifier{b.r.Schema, "z"}.Sanitize()
	a := pgx.Identifier{other, "a"}.Sanitize()
	b.r.Exec(t, "CREATE TABLE "+z+" (id int PRIMARY KEY, body text)")
	b.r.Exec(t, "CREATE TABLE "+a+" (id int PRIMARY KEY, body text)")
	b.r.Exec(t, "INSERT INTO "+z+" VALUES (1, 'z1'), (2, 'z2'), (3, 'z3')")
	b.r.Exec(t, "INSERT INTO "+a+" VALUES (1, 'a1')")
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: cdc.TableName(b.r.Schema, "z")}, {Match: cdc.TableName(other, "a")}}
	cfg.InitialLoad = true
	cfg.BatchSize = 1
	cfg.State = pgrepl.NewMemoryState()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	first := b.fetch(t, s, 1, true)
	require.Equal(t, cdc.TableName(b.r.Schema, "z"), first[0].Table, "Postgres lists s.z first")
	s.Close() // interrupted inside s.z

	s = b.source(t, cfg)
	got := b.fetch(t, s, 3, true)
	var tables []string
	for _, ch := range got {
		tables = append(tables, ch.Table+"/"+ch.DocKey)
	}
	require.Equal(t, []string{cdc.TableName(b.r.Schema, "z") + "/2", cdc.TableName(b.r.Schema, "z") + "/3", cdc.TableName(other, "a") + "/1"}, tables)
}

// TestUnmatchedTablesAreNotDeadLettered: a table the publication holds but
// tables[] does not (here one without any key) is handed over with its
// table only, for the pipeline to count as unmatched_table.
func TestUnmatchedTablesAreNotDeadLettered(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.audit (at timestamptz, what text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s.audit REPLICA IDENTITY FULL`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s.audit`, b.r.Publication, b.table(), b.r.Schema))
	s := b.source(t, b.config())
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.audit VALUES (now(), 'x')`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s.audit`, b.r.Schema))
	got := b.fetch(t, s, 2, true)
	for _, ch := range got {
		require.Equal(t, b.r.Schema+".audit", ch.Table)
		require.Empty(t, ch.DocKey)
		require.Nil(t, ch.After)
	}
}

// TestNamesThatNeedEscaping: a schema with a '.', a table with '%', a
// quote and a space work end to end with an auto-created publication,
// written in tables[].match as Change.Table names them.
func TestNamesThatNeedEscaping(t *testing.T) {
	b := pgSetup(t)
	schema := b.r.Schema + ".v2"
	table := `100% "done" list`
	name := pgx.Identifier{schema, table}.Sanitize()
	b.r.Exec(t, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() {
		_, _ = b.r.Conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	b.r.Exec(t, "CREATE TABLE "+name+" (id int PRIMARY KEY, body text)")
	b.r.Exec(t, "INSERT INTO "+name+" VALUES (1, 'loaded')")
	match := cdc.TableName(schema, table)
	require.Equal(t, b.r.Schema+`%2Ev2.100%25 "done" list`, match)
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: match}}
	cfg.InitialLoad = true
	s := b.source(t, cfg)
	b.fetch(t, s, 1, true)
	b.r.Exec(t, "INSERT INTO "+name+" VALUES (2, 'streamed')")
	got := b.fetch(t, s, 1, true)
	last := got[len(got)-1]
	require.Equal(t, match, last.Table)
	require.Equal(t, "2", last.DocKey)
}

// TestPartitionChangesReachTheParent: with the publication ragsync creates
// (publish_via_partition_root), a change to a partition arrives under the
// parent's name, which tables[] matches and the load reads.
func TestPartitionChangesReachTheParent(t *testing.T) {
	b := pgSetup(t)
	parent := b.r.Schema + ".events"
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int, year int, body text, PRIMARY KEY (id, year)) PARTITION BY LIST (year)`, parent))
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.events_2024 PARTITION OF %s FOR VALUES IN (2024)`, b.r.Schema, parent))
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.events_2025 PARTITION OF %s FOR VALUES IN (2025)`, b.r.Schema, parent))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 2024, 'old')`, parent))
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: parent}}
	cfg.InitialLoad = true
	s := b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, parent, got[0].Table)
	require.Equal(t, "1/2024", got[0].DocKey)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2, 2025, 'new')`, parent))
	got = b.fetch(t, s, 1, true)
	require.Equal(t, parent, got[len(got)-1].Table)
	require.Equal(t, "2/2025", got[len(got)-1].DocKey)
}

// TestTableAddedToTablesIsPublishedAndLoaded: a table that joins tables[]
// after ragsync created the publication is added to it at the next start
// and its rows are loaded; its later changes stream.
func TestTableAddedToTablesIsPublishedAndLoaded(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.State = pgrepl.NewMemoryState()
	s := b.source(t, cfg)
	last, err := s.Fetch(t.Context())
	require.NoError(t, err)
	require.NoError(t, last.Ack(t.Context()))
	s.Close()

	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.notes (id int PRIMARY KEY, body text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.notes VALUES (7, 'seven')`, b.r.Schema))
	cfg.Tables = append(cfg.Tables, cdc.TableConfig{Match: b.r.Schema + ".notes"})
	s = b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, cdc.OpRead, got[0].Op)
	require.Equal(t, b.r.Schema+".notes", got[0].Table)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.notes VALUES (8, 'eight')`, b.r.Schema))
	got = b.fetch(t, s, 1, true)
	require.Equal(t, "8", got[len(got)-1].DocKey)

	// A publication ragsync did not create is not altered: the start is
	// refused with the statement to run.
	s.Close()
	cfg.Tables = append(cfg.Tables, cdc.TableConfig{Match: b.r.Schema + ".more"})
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.more (id int PRIMARY KEY)`, b.r.Schema))
	cfg.State = pgrepl.NewMemoryState()
	_, err = pgrepl.New(t.Context(), cfg)
	require.Error(t, err)
	t.Log(err)
	require.ErrorContains(t, err, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{b.r.Publication}.Sanitize(), pgx.Identifier{b.r.Schema, "more"}.Sanitize()))
}

// TestDroppedPublicationIsNamed: a publication dropped under a running
// source is reported as such, with a recovery that works: slot drop, then
// start again.
func TestDroppedPublicationIsNamed(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.State = pgrepl.NewMemoryState()
	s := b.source(t, cfg)
	b.r.Exec(t, "DROP PUBLICATION "+b.r.Publication)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := s.Fetch(ctx)
	require.Error(t, err)
	t.Log(err)
	require.ErrorContains(t, err, fmt.Sprintf("publication %q was dropped", b.r.Publication))
	require.ErrorContains(t, err, "ragsync slot drop")
	var perm interface{ Permanent() bool }
	require.ErrorAs(t, err, &perm)
	s.Close()

	// A restart says the same before streaming.
	_, err = pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "is gone but slot")
	// Following the advice recovers.
	require.Eventually(t, func() bool { _, err := pgrepl.Drop(t.Context(), cfg, false); return err == nil }, 10*time.Second, 100*time.Millisecond)
	s = b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))
	got := b.fetch(t, s, 1, true)
	require.Equal(t, "2", got[0].DocKey)
}

// TestDeadLetterKeepsTheChange: a dead letter of this source holds the
// change as JSON, and a replay hands it over again with its version.
func TestDeadLetterKeepsTheChange(t *testing.T) {
	b := pgSetup(t)
	dir := t.TempDir()
	dlq := dir + "/dlq.jsonl"
	cfg := b.config()
	cfg.DLQPath = dlq
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	batch, err := s.Fetch(ctx)
	require.NoError(t, err)
	require.NoError(t, file.NewDeadLetters(dlq, "test").Put(ctx, batch.Records[0], fmt.Errorf("embed: down")))
	require.NoError(t, batch.Ack(ctx))
	s.Close()
	dls, err := pgrepl.DeadLetterFile(dlq).List(t.Context(), 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, "embed: down", dls[0].ErrorMessage)
	var ch cdc.Change
	require.NoError(t, json.Unmarshal(dls[0].Value, &ch))
	require.Equal(t, "1", ch.DocKey)

	// Replay reads the row again as it is now, at the dead letter's version.
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET title = 'one, edited' WHERE id = 1`, b.table()))
	n, err := pgrepl.DeadLetterFile(dlq).Replay(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	s = b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, "1", got[0].DocKey)
	require.Equal(t, batch.Records[0].Change.Version.String(), got[0].Version.String())
	require.Equal(t, "one, edited", got[0].After["title"])
	s.Close()
	left, err := os.ReadFile(pgrepl.ReplayPath(dlq))
	require.NoError(t, err)
	require.Empty(t, left, "the replay file is emptied once applied")
}

var _ = pgtest.URL

// TestRenamedTemplateColumnIsWarned: a column the text template names,
// renamed while the source streams, is warned about with the fix when the
// schema change reaches the stream.
func TestRenamedTemplateColumnIsWarned(t *testing.T) {
	b := pgSetup(t)
	var logs syncBuffer
	cfg := b.config()
	cfg.TextColumns = map[string][]string{b.table(): {"title", "body"}}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.fetch(t, s, 1, true)
	require.NotContains(t, logs.String(), "missing_columns")
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s RENAME COLUMN body TO content`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))
	b.fetch(t, s, 1, true)
	t.Log(logs.String())
	require.Contains(t, logs.String(), "missing_columns=[body]")
	require.Contains(t, logs.String(), "tables[].text")
}

// failingState is a MemoryState whose ForgetLoad fails: the step of a
// first start right after the slot was created and recorded. before, when
// set, runs first (a test ends the start's SQL session there).
type failingState struct {
	pgrepl.State
	before func() error
}

func (s failingState) ForgetLoad(context.Context, string) error {
	if s.before != nil {
		if err := s.before(); err != nil {
			return err
		}
	}
	return fmt.Errorf("state store down")
}

// requireForgotten checks that state no longer records the test's slot
// and publication as created by ragsync.
func (b *pgBundle) requireForgotten(t *testing.T, state pgrepl.State) {
	t.Helper()
	for _, kind := range []string{pgrepl.KindSlot, pgrepl.KindPublication} {
		name := map[string]string{pgrepl.KindSlot: b.r.Slot, pgrepl.KindPublication: b.r.Publication}[kind]
		created, _ := state.Created(t.Context(), kind, "test", name)
		require.False(t, created, kind)
	}
}

// TestFailedStartAfterTheSlotDropsTheSlot: when a step after the slot's
// creation fails (here the state store, with the initial load's snapshot
// exported, so the walsender still holds the slot), the start drops the slot
// and the publication it created: nothing is left holding WAL.
func TestFailedStartAfterTheSlotDropsTheSlot(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.InitialLoad = true
	state := failingState{State: pgrepl.NewMemoryState()}
	cfg.State = state
	_, err := pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "state store down")
	pub, slot := b.exists(t)
	require.False(t, slot, "the slot this start created is dropped again")
	require.False(t, pub, "the publication this start created is dropped again")
	b.requireForgotten(t, state)
}

// TestFailedStartUndoesOnANewSessionWhenItsOwnEnded: a start whose SQL
// session the server ended before a later step failed still drops the slot
// and the publication it created, over a new connection: the one it
// created them on is gone.
func TestFailedStartUndoesOnANewSessionWhenItsOwnEnded(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	ended := 0
	state := failingState{State: pgrepl.NewMemoryState(), before: func() error {
		return b.r.Conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()`, b.r.App).Scan(&ended)
	}}
	cfg.State = state
	_, err := pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "state store down")
	require.Equal(t, 1, ended, "the start's SQL session was ended")
	pub, slot := b.exists(t)
	require.False(t, slot, "the slot this start created is dropped over a new session")
	require.False(t, pub, "the publication this start created is dropped over a new session")
	b.requireForgotten(t, state)
}

// TestRevokedSelectIsNamed: SELECT revoked from the source's role while the
// initial load reads a table stops the source with the GRANT to run, and
// says the next start resumes the load.
func TestRevokedSelectIsNamed(t *testing.T) {
	b := pgSetup(t)
	role := "ragsync_ro_" + b.r.Slot[len("ragsync_test_"):]
	b.r.Exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION`, role))
	t.Cleanup(func() {
		_, _ = b.r.Conn.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	b.r.Exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT ON %s TO %s`, b.r.Schema, role, b.table(), role))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT g, 'title '||g, 'body '||g FROM generate_series(1, 20) g`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, b.r.Publication, b.table()))
	cfg := b.config()
	require.Contains(t, cfg.URL, "postgres@")
	cfg.URL = strings.Replace(cfg.URL, "postgres@", role+"@", 1)
	cfg.InitialLoad = true
	cfg.BatchSize = 1
	cfg.State = pgrepl.NewMemoryState()
	s := b.source(t, cfg)
	b.fetch(t, s, 1, true)
	b.r.Exec(t, fmt.Sprintf(`REVOKE SELECT ON %s FROM %s`, b.table(), role))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	got := 1
	for err == nil {
		var batch cdc.Batch
		if batch, err = s.Fetch(ctx); err == nil {
			got += len(batch.Records)
			require.NoError(t, batch.Ack(ctx))
		}
	}
	t.Log(err)
	require.Less(t, got, 20, "the load stopped at the revoke")
	name := pgx.Identifier{b.r.Schema, "articles"}.Sanitize()
	require.ErrorContains(t, err, fmt.Sprintf("read %s: the source refused it (permission denied for table articles): run GRANT SELECT ON %s TO <role of source.postgres.url>, then start serve again, which resumes the load", name, name))
	require.Equal(t, 1, strings.Count(err.Error(), "read "+name), "the read is named once: %v", err)
	var perm interface{ Permanent() bool }
	require.ErrorAs(t, err, &perm)
}

// TestRenamedTemplateColumnOfAPartitionedTableIsWarned: a column the text
// template names, renamed on a partitioned table (which renames it in every
// partition), is warned about under the parent's name when a partition's
// next change reaches the stream through the parent.
func TestRenamedTemplateColumnOfAPartitionedTableIsWarned(t *testing.T) {
	b := pgSetup(t)
	parent := b.r.Schema + ".events"
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int, year int, body text, PRIMARY KEY (id, year)) PARTITION BY LIST (year)`, parent))
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.events_2024 PARTITION OF %s FOR VALUES IN (2024)`, b.r.Schema, parent))
	var logs syncBuffer
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: parent}}
	cfg.TextColumns = map[string][]string{parent: {"body"}}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 2024, 'one')`, parent))
	b.fetch(t, s, 1, true)
	require.NotContains(t, logs.String(), "missing_columns")
	b.r.Exec(t, fmt.Sprintf(`ALTER TABLE %s RENAME COLUMN body TO content`, parent))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.events_2024 VALUES (2, 2024, 'two')`, b.r.Schema))
	got := b.fetch(t, s, 1, true)
	require.Equal(t, parent, got[len(got)-1].Table)
	t.Log(logs.String())
	require.Contains(t, logs.String(), "missing_columns=[body]")
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "missing_columns") {
			line = l
		}
	}
	require.Contains(t, line, `events\"`, "named by the parent")
	require.NotContains(t, line, "events_2024")
	require.Contains(t, logs.String(), "tables[].text")
}

// TestNamesWithPatternCharacters: a table whose name holds the pattern
// characters *, ? and [ is written in tables[].match with each escaped by
// a backslash; the publication is created for it, and its changes arrive
// under its own name, which the escaped match selects.
func TestNamesWithPatternCharacters(t *testing.T) {
	b := pgSetup(t)
	table := `[draft] notes*?`
	name := pgx.Identifier{b.r.Schema, table}.Sanitize()
	b.r.Exec(t, "CREATE TABLE "+name+" (id int PRIMARY KEY, body text)")
	b.r.Exec(t, "INSERT INTO "+name+" VALUES (1, 'loaded')")
	match := b.r.Schema + `.\[draft] notes\*\?`
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: match}}
	cfg.InitialLoad = true
	s := b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, b.r.Schema+"."+table, got[0].Table)
	_, ok := cdc.LookupTable(cfg.Tables, got[0].Table)
	require.True(t, ok, "the escaped match selects the change's table")
	b.r.Exec(t, "INSERT INTO "+name+" VALUES (2, 'streamed')")
	got = b.fetch(t, s, 1, true)
	require.Equal(t, "2", got[len(got)-1].DocKey)
}

// TestUnusableSlotOrPublicationIsRefused: a slot of the configured name
// that another plugin or another database owns, and a publication that
// does not publish every action, are refused with the fix, and the start
// creates nothing.
func TestUnusableSlotOrPublicationIsRefused(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.State = pgrepl.NewMemoryState()

	b.r.Exec(t, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", b.r.Slot)
	_, err := pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, fmt.Sprintf(`source.postgres.slot: slot %q uses plugin "test_decoding", ragsync needs pgoutput: choose another slot name`, b.r.Slot))
	pub, _ := b.exists(t)
	require.False(t, pub, "no publication was created")
	b.r.Exec(t, "SELECT pg_drop_replication_slot($1)", b.r.Slot)

	// A pgoutput slot of that name in another database.
	oc, err := pgx.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	oc.Database = "postgres"
	other, err := pgx.ConnectConfig(t.Context(), oc)
	require.NoError(t, err)
	defer other.Close(context.Background())
	var db string
	require.NoError(t, other.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	require.Equal(t, "postgres", db)
	_, err = other.Exec(t.Context(), "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", b.r.Slot)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = other.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", b.r.Slot) })
	_, err = pgrepl.New(t.Context(), cfg)
	var here string
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&here))
	require.ErrorContains(t, err, fmt.Sprintf(`source.postgres.slot: slot %q belongs to database "postgres", not %q: choose another slot name`, b.r.Slot, here))
	pub, _ = b.exists(t)
	require.False(t, pub, "no publication was created")
	_, err = other.Exec(t.Context(), "SELECT pg_drop_replication_slot($1)", b.r.Slot)
	require.NoError(t, err)

	// A publication of that name that publishes inserts only.
	b.r.Exec(t, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, b.r.Publication, b.table()))
	_, err = pgrepl.New(t.Context(), cfg)
	require.ErrorContains(t, err, "does not publish update, delete, truncate")
	require.ErrorContains(t, err, "ALTER PUBLICATION")
	_, slot := b.exists(t)
	require.False(t, slot, "no slot was created")
}

// staleIndex is an index whose every document of table is older than any
// load: a reconcile would delete each one not loaded again.
// staleIndex lists keys as documents this database wrote (source) at a
// position below any load's.
type staleIndex struct {
	keys   []string
	source string
}

func (x staleIndex) LiveVersions(_ context.Context, _ string, fn func(string, cdc.Version) error) error {
	for _, k := range x.keys {
		if err := fn(k, cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{1, 0}, Source: x.source}); err != nil {
			return err
		}
	}
	return nil
}

// TestResumedLoadNeverReconciles: a load read from the slot's snapshot
// deletes the documents whose rows it did not find; a load interrupted and
// resumed on a later snapshot skips the rows it loaded before, so it cannot
// tell them from gone rows, and deletes nothing.
func TestResumedLoadNeverReconciles(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT g, 't'||g, 'b'||g FROM generate_series(1, 3) g`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.BatchSize = 1
	cfg.State = pgrepl.NewMemoryState()
	src, err := cdc.ReadPostgresSource(t.Context(), b.r.Conn)
	require.NoError(t, err)
	cfg.Index = staleIndex{keys: []string{"1", "2", "3", "9"}, source: src}
	ops := func(got []cdc.Change) (out []string) {
		for _, ch := range got {
			if ch.DocKey != "" {
				out = append(out, string(ch.Op)+":"+ch.DocKey)
			}
		}
		return out
	}

	// Interrupted after the first row.
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"r:1"}, ops(b.fetch(t, s, 1, true)))
	s.Close()

	// Resumed: rows 2 and 3, and no delete (not of 1, which it did not
	// read again, nor of 9).
	s = b.source(t, cfg)
	got := b.fetch(t, s, 2, true)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (4, 'streamed', 'x')`, b.table()))
	got = append(got, b.fetch(t, s, 1, true)...)
	require.Equal(t, []string{"r:2", "r:3", "c:4"}, ops(got))
	s.Close()

	// A full load from a new slot's snapshot does reconcile: 9 is gone.
	// (This index does not see what the load writes, so it lists only 9.)
	require.Eventually(t, func() bool { _, err := pgrepl.Drop(t.Context(), cfg, false); return err == nil }, 10*time.Second, 100*time.Millisecond)
	cfg.Index = staleIndex{keys: []string{"9"}, source: src}
	cfg.BatchSize = 10
	s = b.source(t, cfg)
	require.Equal(t, []string{"r:1", "r:2", "r:3", "r:4", "d:9"}, ops(b.fetch(t, s, 5, true)))
}

// TestAddedTableWithoutReplicaIdentityIsNotPublished: a table without a
// usable replica identity that joins tables[] after ragsync created the
// publication is refused with the fix, and not added to the publication,
// where Postgres would refuse the application's UPDATE and DELETE on it.
func TestAddedTableWithoutReplicaIdentityIsNotPublished(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.State = pgrepl.NewMemoryState()
	s := b.source(t, cfg)
	s.Close()
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.nokey (a int, b text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.nokey VALUES (1, 'x')`, b.r.Schema))
	cfg.Tables = append(cfg.Tables, cdc.TableConfig{Match: b.r.Schema + ".nokey"})
	var err error
	require.Eventually(t, func() bool {
		_, err = pgrepl.New(t.Context(), cfg)
		return err != nil && !strings.Contains(err.Error(), "in use")
	}, 10*time.Second, 100*time.Millisecond)
	t.Log(err)
	require.ErrorContains(t, err, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", pgx.Identifier{b.r.Schema, "nokey"}.Sanitize()))
	var published bool
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND tablename = 'nokey')`, b.r.Publication).Scan(&published))
	require.False(t, published, "the table was not added to the publication")
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s.nokey SET b = 'y'`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s.nokey`, b.r.Schema))
}

// TestRevokedReplicationIsNamed: REPLICATION revoked from the source's role
// while it streams stops the source at its next connection with the
// ALTER ROLE to run, instead of reconnecting for ever with the server's
// bare refusal.
func TestRevokedReplicationIsNamed(t *testing.T) {
	b := pgSetup(t)
	role := "ragsync_rp_" + b.r.Slot[len("ragsync_test_"):]
	b.r.Exec(t, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION`, role))
	t.Cleanup(func() {
		_, _ = b.r.Conn.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s; DROP ROLE %s`, role, role))
	})
	b.r.Exec(t, fmt.Sprintf(`GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT ON %s TO %s`, b.r.Schema, role, b.table(), role))
	b.r.Exec(t, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s`, b.r.Publication, b.table()))
	cfg := b.config()
	cfg.URL = strings.Replace(cfg.URL, "postgres@", role+"@", 1)
	cfg.State = pgrepl.NewMemoryState()
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.fetch(t, s, 1, true)

	b.r.Exec(t, fmt.Sprintf(`ALTER ROLE %s NOREPLICATION`, role))
	b.r.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`, b.r.App)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var err error
	for err == nil {
		var batch cdc.Batch
		if batch, err = s.Fetch(ctx); err == nil {
			require.NoError(t, batch.Ack(ctx))
		}
	}
	t.Log(err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the source kept reconnecting")
	require.ErrorContains(t, err, "the source refused ragsync's role")
	require.ErrorContains(t, err, "ALTER ROLE <role> REPLICATION")
	var perm interface{ Permanent() bool }
	require.ErrorAs(t, err, &perm)
	require.Contains(t, s.Unhealthy(), "refused ragsync's role", "/readyz says it too")
}

// TestAbandonDropsWhatThisStartCreated: a caller whose start-up fails after
// New abandons the source; the slot and publication this start created go
// (a first start leaves nothing holding WAL). A source that had a batch
// acknowledged, or that created nothing, keeps them.
func TestAbandonDropsWhatThisStartCreated(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.State = pgrepl.NewMemoryState()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	s.Abandon()
	pub, slot := b.exists(t)
	require.False(t, slot, "the slot this start created is dropped")
	require.False(t, pub, "the publication this start created is dropped")

	// Acknowledged: the slot holds the position of applied changes.
	s = b.source(t, cfg)
	b.fetch(t, s, 1, true)
	s.Abandon()
	pub, slot = b.exists(t)
	require.True(t, pub && slot, "kept once a batch was acknowledged")

	// Not created by this start: kept.
	s = b.source(t, cfg)
	s.Abandon()
	pub, slot = b.exists(t)
	require.True(t, pub && slot, "kept when an earlier start created them")
}

// TestTableAddedDuringAnUnfinishedLoadIsLoaded: a table that joins tables[]
// while an earlier load is still unfinished is loaded in the same start,
// after the resumed load, not left for a later start (its rows that no
// change touches would be missing until then).
func TestTableAddedDuringAnUnfinishedLoadIsLoaded(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT g, 't'||g, 'b'||g FROM generate_series(1, 3) g`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.BatchSize = 1
	cfg.State = pgrepl.NewMemoryState()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	b.fetch(t, s, 1, true)
	s.Close() // the load of articles is unfinished

	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.notes (id int PRIMARY KEY, body text)`, b.r.Schema))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s.notes VALUES (7, 'seven')`, b.r.Schema))
	cfg.Tables = append(cfg.Tables, cdc.TableConfig{Match: b.r.Schema + ".notes"})
	s = b.source(t, cfg)
	got := b.fetch(t, s, 3, true)
	var rows []string
	for _, ch := range got {
		if ch.DocKey != "" {
			rows = append(rows, string(ch.Op)+":"+ch.Table[len(b.r.Schema)+1:]+"/"+ch.DocKey)
		}
	}
	require.Equal(t, []string{"r:articles/2", "r:articles/3", "r:notes/7"}, rows)
}
