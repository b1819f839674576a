package backfill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/embedder"
)

// stream is the writer's change events as the connector would have
// produced them, appended in commit order to a JSON Lines file that serve
// (a pipeline over a following file.Source) consumes.
type stream struct {
	t      *testing.T
	w      *world
	mu     sync.Mutex
	f      *os.File
	n      int
	last   map[int]uint64 // id → LSN of its last streamed change
	schema string
}

func newStream(t *testing.T, w *world) *stream {
	f, err := os.Create(filepath.Join(t.TempDir(), "events.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return &stream{t: t, w: w, f: f, last: map[int]uint64{}, schema: w.srcName}
}

// emit appends one change event: op c/u with the row, or d.
func (s *stream) emit(op string, id int, lsn uint64, title, body string) {
	s.t.Helper()
	src := map[string]any{"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "db": "test",
		"schema": s.schema, "table": "articles", "snapshot": "false", "lsn": lsn, "ts_ms": time.Now().UnixMilli()}
	v := map[string]any{"op": op, "source": src, "ts_ms": time.Now().UnixMilli(), "before": nil, "after": nil}
	if op == "d" {
		v["before"] = map[string]any{"id": id}
	} else {
		v["after"] = map[string]any{"id": id, "title": title, "body": body}
	}
	line, err := json.Marshal(map[string]any{"topic": "dbserver1." + s.schema + ".articles", "key": map[string]any{"id": id}, "value": v})
	require.NoError(s.t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.f.Write(append(line, '\n'))
	require.NoError(s.t, err)
	s.n++
	s.last[id] = lsn
}

// change runs one statement in tx and returns the LSN its change record
// sits at (the insert position right after it, inside the transaction:
// above the record's start, below the commit's).
func change(t *testing.T, tx pgx.Tx, sql string, args ...any) uint64 {
	t.Helper()
	_, err := tx.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
	var lsn uint64
	require.NoError(t, tx.QueryRow(context.Background(), "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint - 1").Scan(&lsn))
	return lsn
}

// TestBackfillRacesLiveChanges runs a backfill while a writer updates,
// deletes and inserts rows and serve applies the writer's change events,
// including a transaction that straddles the snapshot position (written
// before, committed after). The index also holds documents of rows deleted
// while nothing streamed, which the backfill's reconciliation must remove
// without undoing any of the writer's changes. Afterwards the index must
// equal a fresh backfill of the table's final state.
func TestBackfillRacesLiveChanges(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed_", seed), func(t *testing.T) { raceOnce(t, seed) })
	}
}

func raceOnce(t *testing.T, seed uint64) {
	w := newWorld(t)
	const rows = 120
	w.seed(rows)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 12))
	s := newStream(t, w)
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	tbl := w.table()

	rev := map[int]int{}
	live := map[int]bool{}
	for id := 1; id <= rows; id++ {
		live[id] = true
	}
	// write commits one change and streams it.
	write := func(id int, op string) {
		tx, err := w.src.Begin(ctx)
		require.NoError(t, err)
		var lsn uint64
		switch op {
		case "u":
			rev[id]++
			lsn = change(t, tx, "UPDATE "+tbl+" SET body = $2, title = $3 WHERE id = $1", id, body(id, rev[id]), fmt.Sprintf("Title %d r%d", id, rev[id]))
		case "d":
			lsn = change(t, tx, "DELETE FROM "+tbl+" WHERE id = $1", id)
			live[id] = false
		case "c":
			lsn = change(t, tx, "INSERT INTO "+tbl+" VALUES ($1, $2, $3)", id, fmt.Sprintf("Title %d r%d", id, rev[id]), body(id, rev[id]))
			live[id] = true
		}
		require.NoError(t, tx.Commit(ctx))
		if op == "d" {
			s.emit("d", id, lsn, "", "")
		} else {
			s.emit(op, id, lsn, fmt.Sprintf("Title %d r%d", id, rev[id]), body(id, rev[id]))
		}
	}
	pick := func(exclude ...int) int {
		for {
			id := 1 + rng.IntN(rows+20)
			ok := true
			for _, e := range exclude {
				ok = ok && id != e
			}
			if ok {
				return id
			}
		}
	}
	op := func(id int) string {
		switch {
		case !live[id]:
			return "c"
		case rng.IntN(4) == 0:
			return "d"
		default:
			return "u"
		}
	}
	// Changes committed (and streamed) before the backfill: the snapshot
	// holds their state or a newer one.
	for i := 0; i < 10; i++ {
		id := pick()
		write(id, op(id))
	}

	// Rows deleted while nothing captured them: their documents are in
	// the index, their rows in no snapshot.
	var phantomLSN uint64
	require.NoError(t, w.src.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&phantomLSN))
	phantoms := []int{rows + 30, rows + 31, rows + 32}
	for _, id := range phantoms {
		s.emit("c", id, phantomLSN, fmt.Sprintf("Title %d", id), body(id, 0))
	}

	// The straddling transaction: its change record is before the snapshot
	// position, its commit after.
	const straddleID = 7
	straddle, err := w.src.Begin(ctx)
	require.NoError(t, err)
	if !live[straddleID] {
		write(straddleID, "c")
	}
	rev[straddleID]++
	straddleLSN := change(t, straddle, "UPDATE "+tbl+" SET body = $2, title = $3 WHERE id = $1",
		straddleID, body(straddleID, rev[straddleID]), fmt.Sprintf("Title %d r%d", straddleID, rev[straddleID]))

	serveSrc, err := file.NewSource(file.Config{Path: s.f.Name(), Follow: true, PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer serveSrc.Close()
	serve := w.pipeline(serveSrc, emb, st)
	var wg sync.WaitGroup
	var serveErr error
	wg.Add(1)
	go func() { defer wg.Done(); serveErr = serve.Run(ctx) }()

	require.Eventually(t, func() bool {
		live := w.docs("articles")
		for _, id := range phantoms {
			if !live[fmt.Sprintf("%s/%d", tbl, id)].Live {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "serve applies the documents of the rows deleted unseen")

	cfg := w.config(10)
	cfg.Rate = 500
	cfg.Reconcile = st
	// serve applies the connector's events: the backfill's rows take its
	// identity, as `ragsync backfill` does beside a Kafka source.
	cfg.DebeziumServer = "dbserver1"
	bsrc, err := backfill.Open(ctx, cfg, nil)
	require.NoError(t, err)
	defer bsrc.Close()
	var backfillErr error
	backfillDone := make(chan struct{})
	go func() { defer close(backfillDone); backfillErr = w.pipeline(bsrc, emb, st).Run(ctx) }()

	require.Eventually(t, func() bool { return bsrc.Progress().Position != "" }, 10*time.Second, 5*time.Millisecond)
	var pos uint64
	_, err = fmt.Sscanf(bsrc.Progress().Position, "%X/%X", new(uint32), new(uint32))
	require.NoError(t, err)
	require.NoError(t, w.src.QueryRow(ctx, "SELECT ($1::pg_lsn - '0/0')::bigint", bsrc.Progress().Position).Scan(&pos))
	require.Less(t, straddleLSN, pos, "the straddling change must lie before the snapshot position")
	require.NoError(t, straddle.Commit(ctx))
	s.emit("u", straddleID, straddleLSN, fmt.Sprintf("Title %d r%d", straddleID, rev[straddleID]), body(straddleID, rev[straddleID]))

	// Writes during the backfill, one of them held open across others.
	held := pick(straddleID)
	if !live[held] {
		write(held, "c")
	}
	heldTx, err := w.src.Begin(ctx)
	require.NoError(t, err)
	rev[held]++
	heldLSN := change(t, heldTx, "UPDATE "+tbl+" SET body = $2, title = $3 WHERE id = $1", held, body(held, rev[held]), fmt.Sprintf("Title %d r%d", held, rev[held]))
	for i := 0; i < 60; i++ {
		if i == 20 {
			require.NoError(t, heldTx.Commit(ctx))
			s.emit("u", held, heldLSN, fmt.Sprintf("Title %d r%d", held, rev[held]), body(held, rev[held]))
		}
		// The straddled row keeps its straddling content: a later
		// change would hide a lost edit.
		id := pick(held, straddleID)
		if i >= 20 {
			id = pick(straddleID)
		}
		write(id, op(id))
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	<-backfillDone
	require.NoError(t, backfillErr)

	// serve has applied every event once its counters add up to them.
	require.Eventually(t, func() bool {
		n := 0
		for k, v := range serve.Stats() {
			if len(k) == 4 && k[:3] == "op_" {
				n += v
			}
		}
		return n == s.n
	}, 30*time.Second, 20*time.Millisecond, "serve did not apply all %d events", s.n)
	cancel()
	wg.Wait()
	require.NoError(t, serveErr)
	pr := bsrc.Progress()
	t.Logf("seed %d: %d events streamed, backfill read %d rows (%d superseded, %d re-checked, %d documents reconciled away) at %s", seed, s.n, pr.Rows, pr.Superseded, pr.Rechecked, pr.Reconciled, pr.Position)

	// A fresh load of the final state, into another index.
	fresh := w.store("fresh", emb)
	w.backfill(w.config(50), nil, emb, fresh)
	got, want := w.docs("articles"), w.docs("fresh")
	gotLive := map[string]string{}
	for id, d := range got {
		if d.Live {
			gotLive[id] = d.Hashes
		}
	}
	wantLive := map[string]string{}
	for id, d := range want {
		wantLive[id] = d.Hashes
	}
	for id, h := range wantLive {
		if gotLive[id] != h {
			t.Errorf("%s: chunks differ from a fresh load of the final state (live in index: %v)", id, gotLive[id] != "")
		}
	}
	for id := range gotLive {
		if _, ok := wantLive[id]; !ok {
			t.Errorf("%s: live in the index, absent from the final state", id)
		}
	}
	snapVersion := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{pos - 1}}.String()
	for id, d := range got {
		// The stored version also carries the commit time and the snapshot
		// flag (cdc.Version); the position is what this argument is about.
		d.Version, _, _ = strings.Cut(d.Version, ";")
		var n int
		_, err := fmt.Sscanf(id, tbl+"/%d", &n)
		require.NoError(t, err)
		last, streamed := s.last[n]
		lastV := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{last}}.String()
		switch {
		case streamed && d.Version == lastV:
		case d.Version == snapVersion && (!streamed || lastV < snapVersion):
		default:
			t.Errorf("%s: version %s is neither its last streamed change (%s, streamed=%v) nor the snapshot's %s", id, d.Version, lastV, streamed, snapVersion)
		}
	}
	require.GreaterOrEqual(t, pr.Superseded, int64(1), "the straddled row must have been left to the stream")
	require.GreaterOrEqual(t, pr.Reconciled, int64(len(phantoms)), "the documents of rows deleted unseen are reconciled away")
}
