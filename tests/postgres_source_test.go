package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// pgSourceEnv is an env whose source is a table of a pgtest.Replica,
// streamed through slot.
func pgSourceEnv(t *testing.T, r *pgtest.Replica, slot string, extra ...string) *env {
	t.Helper()
	e := newEnv(t, "")
	writePGConfig(t, e, r, slot, extra...)
	return e
}

// writePGConfig writes e's config: tables[] holds articles and the tables
// named in extra (same shape, in r's schema).
func writePGConfig(t *testing.T, e *env, r *pgtest.Replica, slot string, extra ...string) {
	t.Helper()
	more := ""
	for _, x := range extra {
		more += fmt.Sprintf("  - match: %s.%s\n    text: \"# {{title}}\\n\\n{{body}}\"\n", r.Schema, x)
	}
	cfg := fmt.Sprintf(`source:
  kind: postgres
  postgres:
    url: %s
    slot: %s
    publication: %s
    application_name: %s
    status_interval: 1s
    health_interval: 1s
dlq:
  path: %s
tables:
  - match: %s.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
%schunker:
  strategy: greedy
  target_tokens: 30
  min_tokens: 10
  max_tokens: 120
embedder:
  provider: hashing
  dimensions: 256
postgres:
  url: %s
  schema: %s
index: articles
http:
  listen: ""
`, pgtest.URL(), slot, r.Publication, r.App, filepath.Join(e.dir, "dlq.jsonl"), r.Schema, more, pgtest.URL(), e.schema)
	require.NoError(t, os.WriteFile(e.cfg, []byte(cfg), 0o644))
}

// liveIndex renders the live documents and their chunks, without versions:
// a streamed index and a fresh load of the same rows version differently
// (commit LSNs vs the load's snapshot point) but must hold the same text.
func liveIndex(t *testing.T, schema string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT c.doc_id, c.position, c.content_hash, c.text FROM %s.chunks c
		JOIN %s.documents d ON d.id = c.doc_id WHERE d.deleted_at IS NULL ORDER BY 1, 2`, s, s))
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var id, h, text string
		var pos int
		require.NoError(t, rows.Scan(&id, &pos, &h, &text))
		out = append(out, fmt.Sprintf("chunk %s#%d %s %q", id, pos, h, text))
	}
	require.NoError(t, rows.Err())
	return out
}

// pgWriter changes the source tables at random in small transactions of
// inserts, updates, key-changing updates and deletes until the
// third-to-last kill, with one 10k-row transaction after kill 3 and one
// truncate after kill 6, so that kills land before, in and after both. It
// writes to notes too, a table that joins tables[] mid-run.
func pgWriter(t *testing.T, r *pgtest.Replica, seed uint64, kills *atomic.Int64) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	rnd := rand.New(rand.NewPCG(seed, seed))
	tbl := r.Schema + ".articles"
	para := func() string {
		ws := make([]string, 8+rnd.IntN(20))
		for i := range ws {
			ws[i] = faultWords[rnd.IntN(len(faultWords))]
		}
		return strings.Join(ws, " ") + "."
	}
	exec := func(sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Errorf("writer: %s: %v", sql, err)
		}
	}
	bulk, truncated := false, false
	for kills.Load() < 9 {
		switch {
		case !bulk && kills.Load() >= 3:
			bulk = true
			exec(fmt.Sprintf(`INSERT INTO %s SELECT g, 'Bulk '||g, 'bulk row '||g FROM generate_series(100000, 110000) g`, tbl))
		case !truncated && kills.Load() >= 6:
			truncated = true
			exec(fmt.Sprintf(`TRUNCATE %s`, tbl))
		default:
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			for range 1 + rnd.IntN(4) {
				id := rnd.IntN(400)
				var q string
				switch rnd.IntN(12) {
				case 0, 1:
					q = fmt.Sprintf(`DELETE FROM %s WHERE id = $1`, tbl)
					_, err = tx.Exec(ctx, q, id)
				case 2:
					// A key change: the old document must go.
					q = fmt.Sprintf(`UPDATE %s SET id = id + 400 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM %s WHERE id = $1 + 400)`, tbl, tbl)
					_, err = tx.Exec(ctx, q, id)
				case 3:
					q = fmt.Sprintf(`INSERT INTO %s.notes VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, r.Schema)
					_, err = tx.Exec(ctx, q, id%50, fmt.Sprintf("Note %d", id%50), para())
				default:
					q = fmt.Sprintf(`INSERT INTO %s VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, tbl)
					_, err = tx.Exec(ctx, q, id, fmt.Sprintf("Doc %d", id), para()+"\n\n"+para())
				}
				if err != nil {
					t.Errorf("writer: %s: %v", q, err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("writer: commit: %v", err)
			}
		}
		time.Sleep(time.Duration(20+rnd.IntN(20)) * time.Millisecond)
	}
}

// progress renders how far a run got: the slot's confirmed position and
// what the index holds.
func progress(t *testing.T, r *pgtest.Replica, schema string) string {
	t.Helper()
	var confirmed *string
	var docs int
	var maxVersion *string
	_ = r.Conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", r.Slot).Scan(&confirmed)
	_ = r.Conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count(*), max(version) FROM %s.documents", pgx.Identifier{schema}.Sanitize())).Scan(&docs, &maxVersion)
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	return fmt.Sprintf("%s %d %s", str(confirmed), docs, str(maxVersion))
}

// waitSlotCaughtUp waits until slot confirmed the source's current WAL.
func waitSlotCaughtUp(t *testing.T, r *pgtest.Replica, slot string, limit time.Duration) {
	t.Helper()
	var s string
	require.NoError(t, r.Conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s))
	end, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	deadline := time.Now().Add(limit)
	for {
		var c *string
		require.NoError(t, r.Conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&c))
		if c != nil {
			if lsn, err := pglogrepl.ParseLSN(*c); err == nil && lsn >= end {
				return
			}
		}
		require.True(t, time.Now().Before(deadline), "slot %s did not catch up with %s in %s", slot, end, limit)
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPostgresSourceKill SIGKILLs serve (source.kind postgres) at random
// moments while a writer inserts, updates, changes keys, deletes, truncates
// and commits a 10k-row transaction, and a table joins tables[] mid-run;
// the index must end equal to a fresh load of the tables' final state, with
// nothing dead-lettered.
func TestPostgresSourceKill(t *testing.T) {
	t.Parallel() // own schema, slot or kfake cluster, own application_name
	if testing.Short() {
		t.Skip("kill test: long; skipped under -short")
	}
	r := pgtest.Replication(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	// notes joins tables[] after the fourth kill: the next start adds it to
	// the publication ragsync created and loads it while the writer runs.
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.notes (id int PRIMARY KEY, title text, body text)`, r.Schema))
	// Rows before the first start: the first runs (and kills) do the load.
	for id := range 60 {
		r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES ($1, $2, $3)`, r.Schema), id, fmt.Sprintf("Doc %d", id), "seed row "+faultWords[id%len(faultWords)])
	}
	e := pgSourceEnv(t, r, r.Slot)

	var wg sync.WaitGroup
	wg.Add(1)
	writing := make(chan struct{})
	var killCount atomic.Int64
	go func() { defer wg.Done(); defer close(writing); pgWriter(t, r, 11, &killCount) }()
	rnd := rand.New(rand.NewPCG(5, 5))
	kills, whileWriting := 0, 0
	for kills < 12 {
		if kills == 4 {
			writePGConfig(t, e, r, r.Slot, "notes")
		}
		before := progress(t, r, e.schema)
		p := e.startServe(fmt.Sprintf("serve-%d", kills))
		// Kill at a random moment after this process made progress (it
		// must get past start-up, and on a loaded machine that takes a
		// while), so that kills land in the load, the stream, the bulk
		// transaction and the truncate rather than always in start-up.
		for i := 0; i < 600 && progress(t, r, e.schema) == before; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Duration(rnd.IntN(2000)) * time.Millisecond)
		select {
		case <-writing:
		default:
			whileWriting++
		}
		kill(t, p)
		kills++
		killCount.Store(int64(kills))
	}
	wg.Wait()
	final := e.startServe("serve-final")
	waitSlotCaughtUp(t, r, r.Slot, 15*time.Minute)
	stopServe(t, final)
	got := liveIndex(t, e.schema)

	// The reference: a new slot whose initial load reads the final rows.
	ref := r.Slot + "_ref"
	t.Cleanup(func() { dropSlotWhenFree(t, r, ref) })
	fresh := pgSourceEnv(t, r, ref, "notes")
	fresh.run(false, "serve", "--once")
	want := liveIndex(t, fresh.schema)

	var rows int
	require.NoError(t, r.Conn.QueryRow(context.Background(), fmt.Sprintf("SELECT (SELECT count(*) FROM %s.articles) + (SELECT count(*) FROM %s.notes)", r.Schema, r.Schema)).Scan(&rows))
	t.Logf("postgres kill: %d SIGKILLs (%d while writing), %d rows at the end, %d chunks", kills, whileWriting, rows, len(want))
	require.GreaterOrEqual(t, whileWriting, 5, "kills must land while the writer runs")
	require.Positive(t, rows)
	requireSameIndex(t, want, got)
	_, err := os.Stat(filepath.Join(e.dir, "dlq.jsonl"))
	require.True(t, os.IsNotExist(err), "no dead letters")
}

// TestPostgresSourceIndexEqualsAFreshLoad is a property test: whatever mix
// of inserts, updates, key-changing updates, deletes, truncates and reloads
// (the slot dropped, rows changed while no slot records them, then a new
// slot's full load) happens between serve --once runs, the index ends equal
// to a fresh load of the final table.
func TestPostgresSourceIndexEqualsAFreshLoad(t *testing.T) {
	r := pgtest.Replication(t)
	tbl := r.Schema + ".articles"
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, title text, body text)`, tbl))
	e := pgSourceEnv(t, r, r.Slot)
	for _, seed := range []uint64{1, 2, 3} {
		rnd := rand.New(rand.NewPCG(seed, 7))
		para := func() string {
			ws := make([]string, 6+rnd.IntN(12))
			for i := range ws {
				ws[i] = faultWords[rnd.IntN(len(faultWords))]
			}
			return strings.Join(ws, " ") + "."
		}
		for round := range 5 {
			reload := round == 2 || rnd.IntN(4) == 0
			if reload {
				// No slot records what happens next: only the reload's
				// snapshot can tell which rows are gone.
				slotDrop(t, e)
				// Rows deleted now are never streamed.
				r.Exec(t, fmt.Sprintf(`DELETE FROM %s WHERE id IN (SELECT id FROM %s ORDER BY id LIMIT 3)`, tbl, tbl))
			}
			for range 5 + rnd.IntN(25) {
				id := rnd.IntN(60)
				switch op := rnd.IntN(20); {
				case op < 8:
					r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, tbl), id, fmt.Sprintf("Doc %d", id), para())
				case op < 12:
					r.Exec(t, fmt.Sprintf(`UPDATE %s SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM %s WHERE id = $2)`, tbl, tbl), id, 60+rnd.IntN(60))
				case op < 18:
					r.Exec(t, fmt.Sprintf(`DELETE FROM %s WHERE id = $1 OR id = $1 + 60`, tbl), id)
				case op < 19 || round == 4:
					r.Exec(t, fmt.Sprintf(`UPDATE %s SET title = title || '!' WHERE id %% 7 = $1`, tbl), id%7)
				default:
					r.Exec(t, fmt.Sprintf(`TRUNCATE %s`, tbl))
				}
			}
			e.run(false, "serve", "--once")
		}
	}
	// A last reload after the last truncate (which empties the index of
	// the table whatever it held), so what it must delete stays visible.
	for _, id := range []int{500, 501, 502} {
		r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES ($1, 'Doomed', 'a row the reload must find gone')`, tbl), id)
	}
	e.run(false, "serve", "--once")
	slotDrop(t, e)
	r.Exec(t, fmt.Sprintf(`DELETE FROM %s WHERE id >= 500`, tbl))
	e.run(false, "serve", "--once")
	got := liveIndex(t, e.schema)
	slotDrop(t, e) // one slot at a time
	fresh := pgSourceEnv(t, r, r.Slot+"_ref")
	t.Cleanup(func() { dropSlotWhenFree(t, r, r.Slot+"_ref") })
	fresh.run(false, "serve", "--once")
	want := liveIndex(t, fresh.schema)
	var rows int
	require.NoError(t, r.Conn.QueryRow(context.Background(), "SELECT count(*) FROM "+tbl).Scan(&rows))
	t.Logf("%d rows, %d chunks at the end", rows, len(want))
	requireSameIndex(t, want, got)
}

// TestPostgresSourceDeadLettersListReplayPurge: an update whose body is an
// unchanged TOAST value, of a row the index never held (initial_load off),
// is dead-lettered with the fix instead of indexed without its body;
// `ragsync dlq list` shows it, `dlq replay` has the next serve read the row
// again and index it whole, and `dlq purge` empties the file.
func TestPostgresSourceDeadLettersListReplayPurge(t *testing.T) {
	r := pgtest.Replication(t)
	tbl := r.Schema + ".articles"
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, title text, body text)`, tbl))
	var sb strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&sb, "%s%d ", faultWords[i%len(faultWords)], uint32(i)*2654435761%9973)
	}
	long := sb.String()
	r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 'Doc 1', $1)`, tbl), long)
	e := pgSourceEnv(t, r, r.Slot)
	b, err := os.ReadFile(e.cfg)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(e.cfg, []byte(strings.Replace(string(b), "    health_interval: 1s\n", "    health_interval: 1s\n    initial_load: false\n", 1)), 0o644))

	e.serveOnce() // creates the slot; the row before it is not loaded
	r.Exec(t, fmt.Sprintf(`UPDATE %s SET title = 'Doc 1, renamed' WHERE id = 1`, tbl))
	stats := e.serveOnce()
	require.Equal(t, 1, stats["dead_lettered"])
	require.Empty(t, liveIndex(t, e.schema), "never indexed without its body")

	out, _ := e.run(false, "dlq", "list")
	t.Log(out)
	require.Contains(t, out, "REPLICA IDENTITY FULL")
	require.Contains(t, out, "body")

	out, _ = e.run(false, "dlq", "replay")
	require.Contains(t, out, "queued 1 change(s)")
	e.serveOnce()
	got := strings.Join(liveIndex(t, e.schema), "\n")
	require.Contains(t, got, "Doc 1, renamed")
	require.Contains(t, got, faultWords[3], "indexed with its body, read again from the source")

	out, _ = e.run(false, "dlq", "list")
	require.Contains(t, out, "no dead letters")
	r.Exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (2, 'Doc 2', 'short')`, tbl))
	out, _ = e.run(false, "dlq", "purge")
	require.Contains(t, out, "purged 0 record(s)")
}

// dropSlotWhenFree drops slot once no walsender holds it: a serve that
// exited leaves its walsender for a moment, and a drop then fails, which
// would leave the slot holding WAL for ever.
func dropSlotWhenFree(t *testing.T, r *pgtest.Replica, slot string) {
	deadline := time.Now().Add(time.Minute)
	for {
		var gone bool
		_, err := r.Conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
		if err != nil {
			_ = r.Conn.QueryRow(context.Background(), "SELECT NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)", slot).Scan(&gone)
		}
		if err == nil || gone {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("drop slot %s: %v", slot, err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slotDrop runs `ragsync slot drop`, waiting while the walsender of a serve
// that just exited still holds the slot.
func slotDrop(t *testing.T, e *env) {
	t.Helper()
	for i := 0; ; i++ {
		out, err := e.run(true, "slot", "drop")
		if err == nil {
			return
		}
		require.Contains(t, out, "in use", "slot drop: %s", out)
		require.Less(t, i, 300, "the slot stayed in use")
		time.Sleep(100 * time.Millisecond)
	}
}
