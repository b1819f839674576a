package pgrepl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// pgBundle is one test's replication world.
type pgBundle struct {
	r *pgtest.Replica
}

func pgSetup(t *testing.T) *pgBundle {
	t.Helper()
	r := pgtest.Replication(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	return &pgBundle{r: r}
}

func (b *pgBundle) table() string { return b.r.Schema + ".articles" }

func (b *pgBundle) config() pgrepl.Config {
	return pgrepl.Config{
		URL: b.r.URL, Slot: b.r.Slot, Publication: b.r.Publication, Tables: []cdc.TableConfig{{Match: b.table()}},
		ApplicationName: b.r.App, StatusInterval: 200 * time.Millisecond, HealthInterval: 200 * time.Millisecond,
	}
}

func (b *pgBundle) source(t *testing.T, cfg pgrepl.Config) *pgrepl.Source {
	t.Helper()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// fetch decodes changes until n arrived, acknowledging each batch when ack.
func (b *pgBundle) fetch(t *testing.T, s *pgrepl.Source, n int, ack bool) []cdc.Change {
	t.Helper()
	// Generous: the walsender decodes every database's WAL, and on a
	// shared, loaded server that can take minutes.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out []cdc.Change
	for len(out) < n {
		batch, err := s.Fetch(ctx)
		require.NoError(t, err, "after %d of %d changes", len(out), n)
		for _, m := range batch.Records {
			require.NotNil(t, m.Change, "the source hands over built changes")
			require.Equal(t, m.Change.Coord.Offset, m.Offset, "the message carries the change's coordinates")
			out = append(out, *m.Change)
		}
		if ack {
			require.NoError(t, batch.Ack(ctx))
		}
	}
	return out
}

// confirmed is the slot's confirmed_flush_lsn.
func (b *pgBundle) confirmed(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", b.r.Slot).Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

func (b *pgBundle) walLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

func TestPostgresSourceLoadsThenStreams(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a'),(2,'two','b'),(3,'three','c')`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	s := b.source(t, cfg)

	loaded := b.fetch(t, s, 3, true)
	for _, ch := range loaded {
		require.Equal(t, cdc.OpRead, ch.Op)
		require.True(t, ch.Version.Snapshot)
		require.Equal(t, b.table(), ch.Table)
		require.Equal(t, loaded[0].Version, ch.Version, "a snapshot is one point in time")
	}
	require.ElementsMatch(t, []string{"1", "2", "3"}, []string{loaded[0].DocKey, loaded[1].DocKey, loaded[2].DocKey})

	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (4,'four','d')`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET body = 'A' WHERE id = 1`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s WHERE id = 2`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`TRUNCATE %s`, b.table()))
	got := b.fetch(t, s, 4, true)
	wantOps := []cdc.Op{cdc.OpCreate, cdc.OpUpdate, cdc.OpDelete, cdc.OpTruncate}
	wantKeys := []string{"4", "1", "2", ""}
	prev := loaded[0].Version
	for i, ch := range got {
		require.Equal(t, wantOps[i], ch.Op, "change %d", i)
		require.Equal(t, wantKeys[i], ch.DocKey, "change %d", i)
		require.Equal(t, cdc.KindPostgres, ch.Version.Kind)
		require.Len(t, ch.Version.Parts, 2)
		require.Positive(t, ch.Version.Compare(prev), "change %d must sort after the one before (and after the snapshot)", i)
		require.NotEmpty(t, ch.TxID)
		prev = ch.Version
	}
	require.Equal(t, map[string]any{"id": json.Number("1"), "title": "one", "body": "A"}, got[1].After)
	require.Equal(t, json.Number("2"), got[2].Before["id"])
}

// TestPostgresSourceConfirmsOnlyWhatWasAcked: the slot's confirmed position
// moves past a transaction only once its batch is acknowledged; a restart
// before that gets the transaction again (nothing lost), after it does not
// (nothing repeated).
func TestPostgresSourceConfirmsOnlyWhatWasAcked(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))
	got := b.fetch(t, s, 2, false)
	require.Equal(t, []string{"1", "2"}, []string{got[0].DocKey, got[1].DocKey})
	time.Sleep(5 * cfg.StatusInterval) // several status updates go out meanwhile
	// The slot may confirm idle WAL before the first commit, never past it.
	require.Less(t, uint64(b.confirmed(t)), got[0].Version.Parts[0], "nothing acknowledged, nothing confirmed")
	s.Close()

	// Restart without having acknowledged: both come again.
	s = b.source(t, cfg)
	got = b.fetch(t, s, 2, true)
	require.Equal(t, []string{"1", "2"}, []string{got[0].DocKey, got[1].DocKey})
	end := b.walLSN(t)
	require.Eventually(t, func() bool { return b.confirmed(t) >= end }, 10*time.Second, 50*time.Millisecond,
		"the acknowledged transactions are confirmed")
	s.Close()

	// Restart after acknowledging: only what is new arrives.
	s = b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (3,'three','c')`, b.table()))
	got = b.fetch(t, s, 1, true)
	require.Equal(t, "3", got[0].DocKey)
}

// TestPostgresSourceLargeTransactionsFlowBeforeTheirEnd: with a tiny
// logical_decoding_work_mem (the server spills to its disk) and a small
// buffer, a committed 10k-row transaction arrives whole, in order, under one
// commit, its first batches handed over while the server is still sending
// it; a rolled-back transaction and a rolled-back savepoint inside the
// committed one never arrive. The server is not asked to stream
// transactions in progress.
func TestPostgresSourceLargeTransactionsFlowBeforeTheirEnd(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.URL = pgtest.URL() + "&options=-c%20logical_decoding_work_mem%3D64kB"
	cfg.BatchSize = 100
	cfg.MaxBufferBytes = 64 << 10
	s := b.source(t, cfg)

	tx := func(sql ...string) {
		c, err := b.r.Conn.Begin(t.Context())
		require.NoError(t, err)
		for _, q := range sql {
			_, err := c.Exec(t.Context(), q)
			require.NoError(t, err, q)
		}
		if strings.HasPrefix(sql[len(sql)-1], "--rollback") {
			require.NoError(t, c.Rollback(t.Context()))
			return
		}
		require.NoError(t, c.Commit(t.Context()))
	}
	fill := fmt.Sprintf(`INSERT INTO %s SELECT g, 'title '||g, repeat('body ', 20) FROM generate_series(%%d, %%d) g`, b.table())
	tx(fmt.Sprintf(fill, 50000, 55000), "--rollback")
	tx(fmt.Sprintf(fill, 1, 6000), "SAVEPOINT s", fmt.Sprintf(fill, 90000, 93000), "ROLLBACK TO SAVEPOINT s", fmt.Sprintf(fill, 6001, 10000))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (0,'after','x')`, b.table()))

	// Hold the first batch unacknowledged while fetching on: the source
	// keeps handing over (Fetch runs ahead of Ack) within its buffer.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var got []cdc.Change
	var held []cdc.Batch
	for len(got) < 10001 {
		batch, err := s.Fetch(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, len(batch.Records), cfg.BatchSize)
		for _, m := range batch.Records {
			got = append(got, *m.Change)
		}
		held = append(held, batch)
		if len(held) > 3 {
			require.NoError(t, held[0].Ack(ctx), "acks in fetch order")
			held = held[1:]
		}
	}
	for _, batch := range held {
		require.NoError(t, batch.Ack(ctx))
	}
	require.Len(t, got, 10001)
	for i, ch := range got[:10000] {
		require.Equal(t, fmt.Sprint(i+1), ch.DocKey, "rows in transaction order, none from the rollbacks")
		require.Equal(t, got[0].Version.Parts[0], ch.Version.Parts[0], "one commit LSN")
		require.Equal(t, uint64(i), ch.Version.Parts[1], "position in the transaction")
		require.Equal(t, got[0].TxID, ch.TxID)
	}
	require.Equal(t, "0", got[10000].DocKey)
	require.Positive(t, got[10000].Version.Compare(got[9999].Version))
	end := b.walLSN(t)
	require.Eventually(t, func() bool { return b.confirmed(t) >= end }, 20*time.Second, 50*time.Millisecond, "everything acknowledged is confirmed")

	var streamed, spilled int64
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT stream_txns, spill_txns FROM pg_stat_replication_slots WHERE slot_name = $1", b.r.Slot).Scan(&streamed, &spilled))
	require.Zero(t, streamed, "the server decodes committed transactions only")
}

// TestPostgresSourceReconnectsAfterWalsenderTerminated kills the source's
// own walsender (found by application_name): the source reconnects and
// resumes from the confirmed position, losing nothing.
func TestPostgresSourceReconnectsAfterWalsenderTerminated(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	b.fetch(t, s, 1, true)

	var n int
	require.NoError(t, b.r.Conn.QueryRow(t.Context(),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`, b.r.App).Scan(&n))
	require.Equal(t, 1, n, "exactly our walsender is terminated")
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))

	// Change 1 may come again (if its confirmation had not reached the
	// server): a duplicate the sink fences. Change 2 must come.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var keys []string
	for !strings.Contains(strings.Join(keys, ","), "2") {
		batch, err := s.Fetch(ctx)
		require.NoError(t, err)
		for _, m := range batch.Records {
			keys = append(keys, m.Change.DocKey)
		}
		require.NoError(t, batch.Ack(ctx))
	}
	require.Subset(t, []string{"1", "2"}, keys)
	require.GreaterOrEqual(t, metricValue(t, reg, "ragsync_source_reconnects_total"), 1.0)
}

// metricValue reads a gauge or counter of reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func TestPostgresSourceSetupErrorsNameTheFix(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.nokey (a int, b text)`, b.r.Schema))
	tests := []struct {
		name    string
		mutate  func(*pgrepl.Config)
		wantErr []string
	}{
		{"no url", func(c *pgrepl.Config) { c.URL = "" }, []string{"source.postgres.url"}},
		{"publication absent, no tables", func(c *pgrepl.Config) { c.Tables = nil }, []string{"source.postgres.publication", "does not exist"}},
		{"pattern cannot make a publication", func(c *pgrepl.Config) { c.Tables = []cdc.TableConfig{{Match: "public.*"}} }, []string{"tables[].match", "create the publication yourself"}},
		{"table without replica identity", func(c *pgrepl.Config) { c.Tables = []cdc.TableConfig{{Match: b.r.Schema + ".nokey"}} }, []string{"REPLICA IDENTITY FULL", "nokey"}},
		// Without a key the table needs a replica identity and tables[].id:
		// one start names both.
		{"table without primary key or id", func(c *pgrepl.Config) { c.Tables = []cdc.TableConfig{{Match: b.r.Schema + ".nokey"}} }, []string{`ALTER TABLE "` + b.r.Schema + `"."nokey" REPLICA IDENTITY FULL`, "set tables[].id for " + b.r.Schema + ".nokey", "add a primary key"}},
		{"table without primary key, with id", func(c *pgrepl.Config) {
			c.Tables = []cdc.TableConfig{{Match: b.r.Schema + ".nokey", ID: []string{"a"}}}
		}, []string{"REPLICA IDENTITY FULL", "nokey"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b.r.Exec(t, "DROP PUBLICATION IF EXISTS "+b.r.Publication)
			cfg := b.config()
			tc.mutate(&cfg)
			_, err := pgrepl.New(t.Context(), cfg)
			require.Error(t, err)
			for _, w := range tc.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	var slots int
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", b.r.Slot).Scan(&slots))
	require.Zero(t, slots, "a failed setup creates no slot")
}

// syncBuffer is a log destination tests can read while the source writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPostgresSourceSlotRetention: while ragsync is stopped the slot keeps
// WAL; at restart the metric shows it and the warning fires; once caught up
// the retained WAL falls again.
func TestPostgresSourceSlotRetention(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	s.Close()

	status := func() pgrepl.SlotStatus {
		st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, b.r.Slot)
		require.NoError(t, err)
		require.True(t, st.Exists)
		return st
	}
	before := status().RetainedWALBytes
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT g, 'title', repeat(md5(g::text), 40) FROM generate_series(1, 3000) g`, b.table()))
	stopped := status().RetainedWALBytes
	require.Greater(t, stopped, before+1<<20, "a stopped consumer's slot retains the WAL written meanwhile")

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.MaxRetainedWALBytes = 1 << 20
	s = b.source(t, cfg)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "max_retained_wal_bytes")
	}, 60*time.Second, 50*time.Millisecond, "the warning fires")
	require.GreaterOrEqual(t, metricValue(t, reg, "ragsync_source_slot_retained_wal_bytes"), float64(stopped))

	b.fetch(t, s, 3000, true)
	// restart_lsn moves at the next running-transactions record, which the
	// server logs every 15s while there is activity: keep some.
	deadline := time.Now().Add(3 * time.Minute)
	for i := 10000; metricValue(t, reg, "ragsync_source_slot_retained_wal_bytes") >= float64(stopped)/2; i++ {
		if time.Now().After(deadline) {
			var restart, confirmed string
			_ = b.r.Conn.QueryRow(t.Context(), "SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", b.r.Slot).Scan(&restart, &confirmed)
			t.Fatalf("the retained WAL did not drain once caught up: restart_lsn %s, confirmed %s, now %s", restart, confirmed, b.walLSN(t))
		}
		b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (%d, 'tick', '')`, b.table(), i))
		b.fetch(t, s, 1, true)
		time.Sleep(500 * time.Millisecond)
	}
}

func TestPostgresSourceReadyzFailsWhenSlotDropped(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	s := b.source(t, cfg)
	require.Empty(t, s.Unhealthy())
	// Drop the slot under the source: terminate its walsender first (the
	// slot is in use), then drop before the reconnect.
	for {
		_, _ = b.r.Conn.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND backend_type = 'walsender'`, b.r.App)
		_, err := b.r.Conn.Exec(t.Context(), "SELECT pg_drop_replication_slot($1)", b.r.Slot)
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return strings.Contains(s.Unhealthy(), "restart serve") }, 10*time.Second, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := s.Fetch(ctx)
	var perm interface{ Permanent() bool }
	require.True(t, errors.As(err, &perm) && perm.Permanent(), "a lost slot stops the pipeline: %v", err)
	require.ErrorContains(t, err, fmt.Sprintf("replication slot %q was dropped outside ragsync", b.r.Slot))
	require.ErrorContains(t, err, "start serve again, which creates it and loads the tables again")
	s.Close()

	// Following the advice recovers: a start creates the slot again.
	s = b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (5,'five','e')`, b.table()))
	got := b.fetch(t, s, 1, true)
	require.Equal(t, "5", got[len(got)-1].DocKey)
}

// TestDropSlot: `ragsync slot drop` refuses while serve streams, then drops
// the slot and the publication ragsync created and forgets the initial
// load, so the next start loads again. A slot ragsync did not create is
// refused without force.
func TestDropSlot(t *testing.T) {
	b := ownDBSetup(t) // whether the publication goes depends on every slot of the database
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	state := pgrepl.NewMemoryState()
	cfg.State = state
	s := b.source(t, cfg)
	b.fetch(t, s, 1, true)
	last, err := s.Fetch(t.Context()) // the load's closing batch records it done
	require.NoError(t, err)
	require.Empty(t, last.Records)
	require.NoError(t, last.Ack(t.Context()))
	rec, _ := state.Load(t.Context(), b.r.Slot)
	require.Equal(t, []string{b.table()}, rec.Loaded)
	require.Empty(t, rec.Pending)

	// The source starts streaming from the slot on its own after the load:
	// wait until the server says so, not for a fixed time.
	require.Eventually(t, func() bool {
		st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, b.r.Slot)
		return err == nil && st.Active
	}, 30*time.Second, 50*time.Millisecond, "the source never streamed from its slot")
	_, err = pgrepl.Drop(t.Context(), cfg, false)
	require.ErrorContains(t, err, "stop `ragsync serve` first")
	s.Close()
	var dropped pgrepl.Dropped
	require.Eventually(t, func() bool { dropped, err = pgrepl.Drop(t.Context(), cfg, false); return err == nil }, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, pgrepl.Dropped{Slot: true, Publication: true, SlotName: b.r.Slot, PublicationName: b.r.Publication}, dropped, "the publication ragsync created goes with its slot")
	st, err := pgrepl.ReadSlotStatus(t.Context(), b.r.Conn, b.r.Slot)
	require.NoError(t, err)
	require.False(t, st.Exists)
	var pubs int
	require.NoError(t, b.r.Conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_publication WHERE pubname = $1", b.r.Publication).Scan(&pubs))
	require.Zero(t, pubs)
	rec, _ = state.Load(t.Context(), b.r.Slot)
	require.False(t, rec.Exists, "the load is forgotten with the slot")
	_, err = pgrepl.Drop(t.Context(), cfg, false)
	require.ErrorContains(t, err, "does not exist")

	// The next start creates the slot again and loads the table again.
	s = b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	require.Equal(t, cdc.OpRead, got[0].Op)
	s.Close()

	// A slot of that name that ragsync did not create is another tool's.
	other := pgrepl.NewMemoryState()
	cfg.State = other
	require.Eventually(t, func() bool {
		_, err = pgrepl.Drop(t.Context(), cfg, false)
		return err != nil && !strings.Contains(err.Error(), "in use")
	}, 10*time.Second, 100*time.Millisecond)
	require.ErrorContains(t, err, "was not created by ragsync")
	require.ErrorContains(t, err, "--force")
	dropped, err = pgrepl.Drop(t.Context(), cfg, true)
	require.NoError(t, err)
	require.Equal(t, pgrepl.Dropped{Slot: true, SlotName: b.r.Slot, PublicationName: b.r.Publication}, dropped, "force drops the slot, never a publication ragsync did not record creating")
}

// TestPostgresSourceResumesAnInterruptedLoad: a load cut short runs again
// at the next start, after the last primary key acknowledged, on a fresh
// snapshot versioned at the slot's confirmed position, below every change
// streamed after it, so rows changed meanwhile still end in their last
// state and no row is loaded twice.
func TestPostgresSourceResumesAnInterruptedLoad(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a'),(2,'two','b'),(3,'three','c'),(4,'four','d')`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	cfg.BatchSize = 2
	cfg.State = pgrepl.NewMemoryState()
	s, err := pgrepl.New(t.Context(), cfg)
	require.NoError(t, err)
	first := b.fetch(t, s, 2, true) // rows 1 and 2, acknowledged
	require.Equal(t, []string{"1", "2"}, []string{first[0].DocKey, first[1].DocKey})
	s.Close() // "crash" before rows 3 and 4 were acknowledged

	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET body = 'A2' WHERE id = 1`, b.table()))
	b.r.Exec(t, fmt.Sprintf(`DELETE FROM %s WHERE id = 3`, b.table()))
	s = b.source(t, cfg)
	got := b.fetch(t, s, 3, true) // row 4 loaded, then the update and the delete
	require.Equal(t, cdc.OpRead, got[0].Op)
	require.Equal(t, "4", got[0].DocKey, "the load resumes after the acknowledged key 2, and row 3 is gone")
	require.Equal(t, cdc.OpUpdate, got[1].Op)
	require.Equal(t, "A2", got[1].After["body"])
	require.Equal(t, cdc.OpDelete, got[2].Op)
	require.Equal(t, "3", got[2].DocKey)
	for _, ch := range got[1:] {
		require.Positive(t, ch.Version.Compare(got[0].Version), "streamed changes sort after the reload")
		require.Positive(t, ch.Version.Compare(first[0].Version), "and after the first load")
	}
}

// TestPostgresSourceAnswersKeepalivesWhileThePipelineIsBusy: with a
// wal_sender_timeout of 2s and no status of its own for 60s, the source
// keeps the connection only by answering the server's reply requests, and
// must do so while a batch sits unacknowledged in a slow pipeline.
func TestPostgresSourceAnswersKeepalivesWhileThePipelineIsBusy(t *testing.T) {
	b := pgSetup(t)
	cfg := b.config()
	cfg.URL = pgtest.URL() + "&options=-c%20wal_sender_timeout%3D2s"
	cfg.StatusInterval = time.Minute
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	s := b.source(t, cfg)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a')`, b.table()))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	batch, err := s.Fetch(ctx)
	require.NoError(t, err)
	time.Sleep(7 * time.Second) // "embedding": over three wal_sender_timeouts
	require.NoError(t, batch.Ack(ctx))
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2,'two','b')`, b.table()))
	got := b.fetch(t, s, 1, true)
	require.Equal(t, "2", got[0].DocKey)
	require.Zero(t, metricValue(t, reg, "ragsync_source_reconnects_total"), "the walsender never timed out")
}

// TestStartSurvivesSessionsEndedAtStartup: the server ends the source's
// first connections as they start (pg_terminate_backend can land there, and
// a server starting up or shutting down answers the same way). The start
// connects again, as serve does for its index, instead of failing before it
// has created anything; the source then streams.
func TestStartSurvivesSessionsEndedAtStartup(t *testing.T) {
	t.Parallel()
	b := pgSetup(t)
	p := pgtest.StartEndingProxy(t, 0, 1, 2)
	cfg := b.config()
	cfg.URL = p.URL
	s := b.source(t, cfg)
	require.GreaterOrEqual(t, p.Seen(), 4, "the ended connections were made again")
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 'a', 'b')`, b.table()))
	got := b.fetch(t, s, 1, true)
	require.Equal(t, cdc.OpCreate, got[0].Op)
}

// TestPostgresSourceNotReadyDuringInitialLoad: until the initial load is
// done (its last batch acknowledged: every loaded row is in the sink),
// Unhealthy, which /readyz answers with, says how far the load is; then it
// is empty.
func TestPostgresSourceNotReadyDuringInitialLoad(t *testing.T) {
	b := pgSetup(t)
	b.r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1,'one','a'),(2,'two','b'),(3,'three','c')`, b.table()))
	cfg := b.config()
	cfg.InitialLoad = true
	s := b.source(t, cfg)
	require.Regexp(t, `^initial load in progress: [01] of 1 tables$`, s.Unhealthy(), "not ready from the start")

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var batches []cdc.Batch
	for n := 0; n < 3; {
		batch, err := s.Fetch(ctx)
		require.NoError(t, err)
		n += len(batch.Records)
		batches = append(batches, batch)
	}
	require.Regexp(t, `^initial load in progress: [01] of 1 tables$`, s.Unhealthy(), "every row handed over, none in the sink yet")
	for _, batch := range batches {
		require.NoError(t, batch.Ack(ctx))
	}
	// The load's last batch (it may carry no rows) records it as done.
	for s.Unhealthy() != "" {
		require.Regexp(t, `^initial load in progress: [01] of 1 tables$`, s.Unhealthy())
		batch, err := s.Fetch(ctx)
		require.NoError(t, err, "ready once the load is done")
		require.NoError(t, batch.Ack(ctx))
	}
}
