package backfill_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

var errEOF = io.EOF

func TestSourceReadsEveryRowOnceInKeyOrder(t *testing.T) {
	w := newWorld(t)
	w.seed(23)
	before := lsnNow(t, w)
	src, err := backfill.Open(context.Background(), w.config(5), nil)
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, int64(23), src.Progress().Total)
	require.True(t, src.Progress().Exact)

	changes := fetchAll(t, src)
	after := lsnNow(t, w)
	require.Len(t, changes, 23)
	for i, ch := range changes {
		require.Equal(t, cdc.OpRead, ch.Op)
		require.True(t, ch.Version.Snapshot, "a backfilled row is a snapshot read")
		require.NotZero(t, ch.Version.TS, "its version carries the read's time")
		require.Equal(t, src.Progress().Source, ch.Version.Source, "and the database read")
		require.Equal(t, w.table(), ch.Table)
		require.Equal(t, fmt.Sprint(i+1), ch.DocKey)
		require.Equal(t, map[string]any{"id": ch.After["id"]}, ch.Key)
		require.Equal(t, fmt.Sprint(i+1), fmt.Sprint(ch.After["id"]), "keyset order")
		require.Equal(t, cdc.KindPostgres, ch.Version.Kind)
		require.Len(t, ch.Version.Parts, 1)
		// The snapshot position lies between what was committed before
		// Open and what is written after the read.
		require.GreaterOrEqual(t, ch.Version.Parts[0]+1, before)
		require.Less(t, ch.Version.Parts[0], after)
		// One snapshot, one position; TS is each row's read time.
		require.Equal(t, changes[0].Version.Parts, ch.Version.Parts, "one snapshot, one version")
		require.Equal(t, changes[0].Version.Snapshot, ch.Version.Snapshot)
	}
	p := src.Progress()
	require.Equal(t, int64(23), p.Rows)
	require.True(t, p.Done)
}

func lsnNow(t *testing.T, w *world) uint64 {
	t.Helper()
	var n uint64
	require.NoError(t, w.src.QueryRow(context.Background(), "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&n))
	return n
}

func TestSourceCompositeKeyAndWhere(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	_, err := w.src.Exec(ctx, "CREATE TABLE "+w.srcName+".notes (tenant text, n int, body text, PRIMARY KEY (tenant, n))")
	require.NoError(t, err)
	_, err = w.src.Exec(ctx, "INSERT INTO "+w.srcName+".notes SELECT t, g, 'note '||g FROM unnest(array['a','b','c']) t, generate_series(1, 7) g")
	require.NoError(t, err)
	cfg := w.config(4)
	cfg.Tables = []backfill.Table{{Name: w.srcName + ".notes", Where: "t.n % 2 = 1"}}
	src, err := backfill.Open(ctx, cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	changes := fetchAll(t, src)
	var got []string
	for _, ch := range changes {
		got = append(got, ch.DocKey)
	}
	var want []string
	for _, tn := range []string{"a", "b", "c"} {
		for n := 1; n <= 7; n += 2 {
			want = append(want, fmt.Sprintf("%s/%d", tn, n)) // primary key order
		}
	}
	require.Equal(t, want, got)
	require.Equal(t, int64(12), src.Progress().Total)
	seen := map[string]bool{}
	for _, k := range got {
		require.False(t, seen[k], "row %s read twice", k)
		seen[k] = true
	}
}

func TestSourceResumesAfterTheLastAcknowledgedPage(t *testing.T) {
	w := newWorld(t)
	w.seed(30)
	ctx := context.Background()
	cp := sink.NewCheckpoints(w.ix, w.ixSchema, "articles")
	require.NoError(t, ensureIndex(w, "articles"))

	src, err := backfill.Open(ctx, w.config(7), cp)
	require.NoError(t, err)
	var first []string
	for i := 0; i < 3; i++ {
		b, err := src.Fetch(ctx)
		require.NoError(t, err)
		if i < 2 { // the third page is read but never acknowledged: a crash
			require.NoError(t, b.Ack(ctx))
			for _, m := range b.Records {
				first = append(first, m.Change.DocKey)
			}
		}
	}
	src.Close()
	require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14"}, first, "two pages acknowledged")
	c, ok, err := cp.Load(ctx, w.table())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"14"}, c.LastKey)
	require.Equal(t, int64(14), c.Rows)
	require.False(t, c.Done)

	cfg := w.config(7)
	cfg.Resume = true
	src, err = backfill.Open(ctx, cfg, cp)
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, int64(16), src.Progress().Total, "what is left to read")
	rest := fetchAll(t, src)
	require.Len(t, rest, 16)
	require.Equal(t, "15", fmt.Sprint(rest[0].After["id"]))
	c, _, err = cp.Load(ctx, w.table())
	require.NoError(t, err)
	require.True(t, c.Done)
	require.Equal(t, int64(30), c.Rows)

	// Without --resume a backfill starts over.
	src2, err := backfill.Open(ctx, w.config(7), cp)
	require.NoError(t, err)
	defer src2.Close()
	require.Len(t, fetchAll(t, src2), 30)
}

// ensureIndex registers index name, which the checkpoints' foreign key
// needs (serve and backfill do it through sink.OpenIndex).
func ensureIndex(w *world, name string) error {
	_, err := w.ix.Exec(context.Background(), "INSERT INTO indexes (name, model, dimensions) VALUES ($1, 'hashing', 64) ON CONFLICT DO NOTHING", name)
	return err
}

// TestSourceStraddlingWriter is the case a plain "snapshot LSN" version gets
// wrong: a transaction writes a row before the snapshot's position and
// commits after it. The snapshot does not see its change, yet the change's
// LSN is below the snapshot's, so a snapshot read versioned at the position
// would fence the streamed change out and lose the edit. The source must
// wait for that transaction and leave the row to the stream.
func TestSourceStraddlingWriter(t *testing.T) {
	w := newWorld(t)
	w.seed(12)
	ctx := context.Background()

	// Straddling: row 3 is changed before the snapshot, committed after.
	straddle, err := w.src.Begin(ctx)
	require.NoError(t, err)
	defer straddle.Rollback(ctx) //nolint:errcheck
	_, err = straddle.Exec(ctx, "UPDATE "+w.table()+" SET title = 'straddled' WHERE id = 3")
	require.NoError(t, err)
	var changeLSN uint64
	require.NoError(t, straddle.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&changeLSN))

	// Locked only, then rolled back: row 5's snapshot copy is still right.
	locker, err := w.src.Begin(ctx)
	require.NoError(t, err)
	defer locker.Rollback(ctx) //nolint:errcheck
	_, err = locker.Exec(ctx, "SELECT 1 FROM "+w.table()+" WHERE id = 5 FOR UPDATE")
	require.NoError(t, err)

	src, err := backfill.Open(ctx, w.config(100), nil)
	require.NoError(t, err)
	defer src.Close()
	type result struct {
		changes []cdc.Change
		err     error
	}
	done := make(chan result, 1)
	go func() {
		b, err := src.Fetch(ctx)
		var out []cdc.Change
		for _, m := range b.Records {
			if m.Change == nil {
				err = fmt.Errorf("message without a change: %v", m.Err)
				continue
			}
			out = append(out, *m.Change)
		}
		done <- result{out, err}
	}()
	// The page waits for the writers to finish.
	require.Eventually(t, func() bool { return src.Progress().Position != "" }, 10*time.Second, 10*time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("page returned while a writer of one of its rows was still open: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, straddle.Commit(ctx))
	require.NoError(t, locker.Rollback(ctx))
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("page still blocked after the writers ended")
	}
	require.NoError(t, r.err)

	ids := map[string]cdc.Change{}
	for _, ch := range r.changes {
		ids[fmt.Sprint(ch.After["id"])] = ch
	}
	require.NotContains(t, ids, "3", "a row changed by a transaction the snapshot does not see is left to the stream")
	require.Contains(t, ids, "5", "a row only locked is read")
	require.Len(t, ids, 11)
	require.Greater(t, ids["5"].Version.Parts[0], changeLSN,
		"the straddling change's LSN is below the snapshot position: this is why row 3 must not carry it")
	p := src.Progress()
	require.Equal(t, int64(1), p.Superseded)
	require.Equal(t, int64(2), p.Rechecked)
}

func TestOpenErrors(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	_, err := w.src.Exec(ctx, "CREATE TABLE "+w.srcName+".nokey (a int, b text)")
	require.NoError(t, err)
	tests := []struct {
		name    string
		cfg     backfill.Config
		wantErr string
	}{
		{"no url", backfill.Config{Tables: []backfill.Table{{Name: w.table()}}}, "backfill.source_url: must be set"},
		{"no tables", backfill.Config{URL: pgtest.URL()}, "pass --table"},
		{"pattern", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: "public.*"}}}, "patterns are not allowed"},
		{"missing table", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.srcName + ".nope"}}}, "no such table"},
		{"no primary key", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.srcName + ".nokey"}}}, "no primary key, set tables[].id"},
		{"bad id column", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.table(), ID: []string{"nope"}}}}, `id column "nope" does not exist`},
		{"bad where", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.table(), Where: "t.nope > 1"}}}, `--where "t.nope > 1": ERROR: column t.nope does not exist`},
		{"negative rate", backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: w.table()}}, Rate: -1}, "backfill rate"},
		{"unreachable", backfill.Config{URL: "postgres://postgres@127.0.0.1:1/x?connect_timeout=2", Tables: []backfill.Table{{Name: w.table()}}}, "connect source"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, err := backfill.Open(ctx, tc.cfg, nil)
			if src != nil {
				src.Close()
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestSourceNoPrimaryKeyUsesConfiguredID(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	_, err := w.src.Exec(ctx, "CREATE TABLE "+w.srcName+".nokey (a int NOT NULL UNIQUE, b text); INSERT INTO "+w.srcName+".nokey SELECT g, 'x' FROM generate_series(1, 9) g")
	require.NoError(t, err)
	cfg := w.config(4)
	cfg.Tables = []backfill.Table{{Name: w.srcName + ".nokey", ID: []string{"a"}}}
	src, err := backfill.Open(ctx, cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	require.Len(t, fetchAll(t, src), 9)
}

func TestSourceRate(t *testing.T) {
	w := newWorld(t)
	w.seed(40)
	cfg := w.config(10)
	cfg.Rate = 100 // 40 rows with a burst of one page: about 0.3s
	src, err := backfill.Open(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	start := time.Now()
	require.Len(t, fetchAll(t, src), 40)
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "--rate must slow the reads down")
}

// TestSourceVersionsTakeTheMovesEpoch: beside a Debezium connector whose
// database moved (source.moves), the rows' versions are of the epoch the
// decoder gives the connector's events of the same time, so they order
// against them; another source's moves do not count.
func TestSourceVersionsTakeTheMovesEpoch(t *testing.T) {
	w := newWorld(t)
	w.seed(3)
	ctx := context.Background()
	var db string
	require.NoError(t, w.src.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	source := "dbz:shop/" + db
	cfg := w.config(10)
	cfg.DebeziumServer = "shop"
	cfg.Moves = []cdc.SourceMove{
		{Source: source, At: time.Now().Add(-time.Hour)},
		{Source: source, At: time.Now().Add(-time.Minute)},
		{Source: source, At: time.Now().Add(time.Hour)}, // not yet
		{Source: "dbz:other/" + db, At: time.Now().Add(-time.Hour)},
	}
	src, err := backfill.Open(ctx, cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	changes := fetchAll(t, src)
	require.Len(t, changes, 3)
	for _, ch := range changes {
		require.Equal(t, source, ch.Version.Source)
		require.Equal(t, uint32(2), ch.Version.Epoch)
	}
	// The connector's event of the row, decoded with the same moves, at
	// the same time and position: the backfill's copy sorts just before it.
	dec := cdc.NewDecoder(cdc.DecoderConfig{Moves: cfg.Moves})
	ev, err := dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "shop." + w.table(), Key: []byte(`{"id":1}`), Value: fmt.Appendf(nil,
		`{"op":"u","after":{"id":1},"source":{"connector":"postgresql","name":"shop","db":%q,"schema":%q,"table":"articles","lsn":%d,"ts_ms":%d}}`,
		db, w.srcName, changes[0].Version.Parts[0], changes[0].Version.TS)}})
	require.NoError(t, err)
	require.Equal(t, ev.Version.Epoch, changes[0].Version.Epoch)
	require.Equal(t, -1, changes[0].Version.Compare(ev.Version))
}

// TestSourceRowWithoutADocumentID: a row whose tables[].id column is null
// or empty is no document; it goes over as the reason, for the pipeline to
// stop on (a backfill keeps no dead letters), instead of being dropped.
func TestSourceRowWithoutADocumentID(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	_, err := w.src.Exec(ctx, "CREATE TABLE "+w.srcName+".slugs (id int PRIMARY KEY, slug text); INSERT INTO "+w.srcName+".slugs VALUES (1, 'a'), (2, ''), (3, 'c')")
	require.NoError(t, err)
	cfg := w.config(10)
	cfg.Tables = []backfill.Table{{Name: w.srcName + ".slugs", ID: []string{"slug"}}}
	src, err := backfill.Open(ctx, cfg, nil)
	require.NoError(t, err)
	defer src.Close()
	b, err := src.Fetch(ctx)
	require.NoError(t, err)
	require.Len(t, b.Records, 3)
	var keys []string
	var failed []error
	for _, m := range b.Records {
		if m.Change != nil {
			keys = append(keys, m.Change.DocKey)
			continue
		}
		failed = append(failed, m.Err)
	}
	require.Equal(t, []string{"a", "c"}, keys)
	require.Len(t, failed, 1)
	var de *cdc.DecodeError
	require.ErrorAs(t, failed[0], &de)
	require.Contains(t, de.Error(), "no document key")
	require.Equal(t, "ragsync-backfill."+w.srcName+".slugs", de.Coord.Topic)
}
