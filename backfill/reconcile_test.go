package backfill_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// live returns the ids of index name's live documents.
func (w *world) live(name string) map[string]bool {
	w.t.Helper()
	out := map[string]bool{}
	for id, d := range w.docs(name) {
		if d.Live {
			out[id] = true
		}
	}
	return out
}

func (w *world) doc(id int) string { return fmt.Sprintf("%s/%d", w.table(), id) }

// reconciling is w.config with reconciliation against st.
func (w *world) reconciling(pageRows int, st backfill.Index) backfill.Config {
	cfg := w.config(pageRows)
	cfg.Reconcile = st
	return cfg
}

// paused holds a backfill once, when it has fetched the first batch that
// when accepts (nil: its first page, read once its snapshot is taken) and
// before the pipeline applies it, until resume is closed.
type paused struct {
	pipeline.Source
	when            func(cdc.Batch) bool
	once            sync.Once
	snapped, resume chan struct{}
}

func (p *paused) Fetch(ctx context.Context) (cdc.Batch, error) {
	b, err := p.Source.Fetch(ctx)
	if err == nil && (p.when == nil || p.when(b)) {
		p.once.Do(func() {
			close(p.snapped)
			select {
			case <-p.resume:
			case <-ctx.Done():
			}
		})
	}
	return b, err
}

// apply runs serve over the events streamed so far, to their end.
func (s *stream) apply(emb embedder.Client, st *sink.Store) {
	s.t.Helper()
	src, err := file.NewSource(file.Config{Path: s.f.Name()})
	require.NoError(s.t, err)
	defer src.Close()
	require.NoError(s.t, s.w.pipeline(src, emb, st).Run(context.Background()))
}

// TestReconcileDeletesDocumentsWhoseRowsAreGone: rows deleted from the
// table while nothing streamed their deletes disappear from the index at
// the next full backfill, at the snapshot's version; documents of another
// version kind are left alone and counted.
func TestReconcileDeletesDocumentsWhoseRowsAreGone(t *testing.T) {
	w := newWorld(t)
	w.seed(20)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	first := w.backfill(w.reconciling(6, st), nil, emb, st)
	require.Len(t, w.live("articles"), 20)
	require.Zero(t, first.Progress().Reconciled)

	// A document written by another kind of source: not ordered by
	// position against the snapshot.
	other := cdc.Version{Kind: cdc.KindTS, Parts: []uint64{uint64(time.Now().Add(-time.Hour).UnixMilli())}}
	out, err := st.Upsert(ctx, sink.Document{Table: w.table(), Key: "77", Version: other, Row: map[string]any{"id": 77}})
	require.NoError(t, err)
	require.True(t, out.Applied)

	_, err = w.src.Exec(ctx, "DELETE FROM "+w.table()+" WHERE id IN (3, 4, 15)")
	require.NoError(t, err)
	second := w.backfill(w.reconciling(6, st), nil, emb, st)
	live := w.live("articles")
	for _, id := range []int{3, 4, 15} {
		require.False(t, live[w.doc(id)], "row %d is gone: its document must be deleted", id)
	}
	require.Len(t, live, 18, "17 rows left, and the document of another kind")
	require.True(t, live[w.doc(77)], "a version of another kind is left alone")
	pr := second.Progress()
	require.Equal(t, int64(3), pr.Reconciled)
	require.Equal(t, int64(1), pr.LeftAlone)
	require.Zero(t, pr.Unreconciled)
	var hi, lo uint64
	_, err = fmt.Sscanf(pr.Position, "%X/%X", &hi, &lo)
	require.NoError(t, err)
	deleted := w.docs("articles")[w.doc(3)].Version
	require.Contains(t, deleted, fmt.Sprintf("pg:%016x;", (hi<<32|lo)-1), "deleted at the rows' version")

	// A third run finds nothing more to delete.
	third := w.backfill(w.reconciling(6, st), nil, emb, st)
	require.Zero(t, third.Progress().Reconciled)
}

// TestReconcileCompositeKeys: keys of several columns, with the separator
// and the escape inside their values, read back as the rows' id columns.
func TestReconcileCompositeKeys(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	tbl := w.srcName + ".notes"
	_, err := w.src.Exec(ctx, "CREATE TABLE "+tbl+" (tenant text, n int, title text, body text, PRIMARY KEY (tenant, n))")
	require.NoError(t, err)
	_, err = w.src.Exec(ctx, "INSERT INTO "+tbl+" SELECT t, g, 'note', 'body of note '||g FROM unnest(array['a/b','c%2F','d']) t, generate_series(1, 3) g")
	require.NoError(t, err)
	emb := embedder.NewHashing(64)
	st := w.store("notes", emb)
	cfg := w.reconciling(4, st)
	cfg.Tables = []backfill.Table{{Name: tbl}}
	run := func() *backfill.Source {
		src, err := backfill.Open(ctx, cfg, nil)
		require.NoError(t, err)
		defer src.Close()
		ch, err := chunker.New(chunker.Config{}.WithDefaults())
		require.NoError(t, err)
		p, err := pipeline.New(pipeline.Config{Tables: []pipeline.TableConfig{{Match: tbl, Text: "{{body}}"}}, Workers: 2},
			pipeline.Stages{Source: src, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: st, Embedder: emb}})
		require.NoError(t, err)
		require.NoError(t, p.Run(ctx))
		return src
	}
	run()
	require.Len(t, w.live("notes"), 9)
	_, err = w.src.Exec(ctx, "DELETE FROM "+tbl+" WHERE (tenant, n) IN (('a/b', 2), ('c%2F', 3))")
	require.NoError(t, err)
	require.Equal(t, int64(2), run().Progress().Reconciled)
	live := w.live("notes")
	require.Len(t, live, 7)
	require.False(t, live[tbl+"/a%2Fb/2"])
	require.False(t, live[tbl+"/c%252F/3"])
	require.True(t, live[tbl+"/a%2Fb/1"])
}

// TestReconcileNeverUndoesAConcurrentChange: while a full backfill runs,
// serve applies a row inserted by a transaction that wrote before the
// snapshot and committed after it (its LSN is below the snapshot's), and a
// document at a version newer than the snapshot whose row is not in the
// table; a third transaction re-creates a row whose delete the index never
// saw, and is still running when the reconciliation starts. All three
// survive, and the row that is really gone does not.
func TestReconcileNeverUndoesAConcurrentChange(t *testing.T) {
	w := newWorld(t)
	w.seed(20)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	w.backfill(w.reconciling(50, st), nil, emb, st)
	s := newStream(t, w)
	tbl := w.table()

	// Row 5 is really gone; row 6 is deleted too, and re-created by a
	// transaction that stays open until the reconciliation waits.
	_, err := w.src.Exec(ctx, "DELETE FROM "+tbl+" WHERE id IN (5, 6)")
	require.NoError(t, err)
	recreate, err := w.src.Begin(ctx)
	require.NoError(t, err)
	defer recreate.Rollback(ctx) //nolint:errcheck
	recreateLSN := change(t, recreate, "INSERT INTO "+tbl+" VALUES (6, 'Title 6 again', $1)", body(6, 1))
	// Row 100 is inserted before the snapshot, committed after it.
	straddle, err := w.src.Begin(ctx)
	require.NoError(t, err)
	defer straddle.Rollback(ctx) //nolint:errcheck
	straddleLSN := change(t, straddle, "INSERT INTO "+tbl+" VALUES (100, 'Title 100', $1)", body(100, 0))

	src, err := backfill.Open(ctx, w.reconciling(5, st), nil)
	require.NoError(t, err)
	defer src.Close()
	h := &paused{Source: src, snapped: make(chan struct{}), resume: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.pipeline(h, emb, st).Run(runCtx) }()
	select {
	case <-h.snapped:
	case err := <-done:
		t.Fatalf("the backfill ended before its first page: %v", err)
	}
	require.Less(t, straddleLSN, src.Position(), "the insert lies before the snapshot")
	require.NoError(t, straddle.Commit(ctx))
	s.emit("c", 100, straddleLSN, "Title 100", body(100, 0))
	// Streamed after the snapshot: row 200 was inserted and deleted, its
	// delete not streamed yet.
	s.emit("c", 200, src.Position()+100, "Title 200", body(200, 0))
	s.apply(emb, st)
	close(h.resume)
	require.Eventually(t, func() bool { return src.Progress().Rows == 18 }, 20*time.Second, 10*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the backfill ended while a transaction from before its snapshot was running: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, recreate.Commit(ctx))
	require.NoError(t, <-done)
	s.emit("c", 6, recreateLSN, "Title 6 again", body(6, 1))
	s.apply(emb, st)

	live := w.live("articles")
	require.False(t, live[w.doc(5)], "row 5 is gone")
	require.True(t, live[w.doc(100)], "a row inserted before the snapshot and committed after it stays")
	require.True(t, live[w.doc(200)], "a change newer than the snapshot stays")
	require.True(t, live[w.doc(6)], "a row re-created by a transaction running at the snapshot stays")
	require.Equal(t, int64(1), src.Progress().Reconciled)
}

// TestReconcileDeletesAreFencedAtTheSnapshot: a row re-created after the
// reconciliation found it gone, and streamed before its delete is applied,
// keeps its document: the delete carries the snapshot's version, older
// than the change.
func TestReconcileDeletesAreFencedAtTheSnapshot(t *testing.T) {
	w := newWorld(t)
	w.seed(10)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	w.backfill(w.reconciling(50, st), nil, emb, st)
	_, err := w.src.Exec(ctx, "DELETE FROM "+w.table()+" WHERE id IN (4, 8)")
	require.NoError(t, err)
	s := newStream(t, w)

	src, err := backfill.Open(ctx, w.reconciling(50, st), nil)
	require.NoError(t, err)
	defer src.Close()
	deletes := func(b cdc.Batch) bool {
		return len(b.Records) > 0 && b.Records[0].Change != nil && b.Records[0].Change.Op == cdc.OpDelete
	}
	h := &paused{Source: src, when: deletes, snapped: make(chan struct{}), resume: make(chan struct{})}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.pipeline(h, emb, st).Run(runCtx) }()
	select {
	case <-h.snapped:
	case err := <-done:
		t.Fatalf("the backfill ended without deleting: %v", err)
	}
	tx, err := w.src.Begin(ctx)
	require.NoError(t, err)
	lsn := change(t, tx, "INSERT INTO "+w.table()+" VALUES (4, 'Title 4 again', $1)", body(4, 1))
	require.NoError(t, tx.Commit(ctx))
	s.emit("c", 4, lsn, "Title 4 again", body(4, 1))
	s.apply(emb, st)
	close(h.resume)
	require.NoError(t, <-done)

	live := w.live("articles")
	require.True(t, live[w.doc(4)], "re-created after the snapshot: the delete is older")
	require.False(t, live[w.doc(8)])
	require.Equal(t, int64(2), src.Progress().Reconciled)
}

// TestReconcileOnlyWholeTables: a --where run and a resumed run read part
// of the table in this snapshot; they delete nothing.
func TestReconcileOnlyWholeTables(t *testing.T) {
	w := newWorld(t)
	w.seed(30)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	cp := sink.NewCheckpoints(w.ix, w.ixSchema, "articles")
	w.backfill(w.reconciling(7, st), cp, emb, st)
	_, err := w.src.Exec(ctx, "DELETE FROM "+w.table()+" WHERE id IN (2, 20)")
	require.NoError(t, err)

	where := w.reconciling(7, st)
	where.Tables[0].Where = "t.id > 0"
	pr := w.backfill(where, cp, emb, st).Progress()
	require.Zero(t, pr.Reconciled)
	require.Equal(t, 1, pr.Unreconciled)
	require.Len(t, w.live("articles"), 30, "--where never reconciles")

	// Two pages acknowledged, then a crash; the resumed run reads the rest
	// in a new snapshot.
	part, err := backfill.Open(ctx, w.reconciling(7, st), cp)
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		b, err := part.Fetch(ctx)
		require.NoError(t, err)
		require.NoError(t, b.Ack(ctx))
	}
	part.Close()
	resumed := w.reconciling(7, st)
	resumed.Resume = true
	pr = w.backfill(resumed, cp, emb, st).Progress()
	require.Equal(t, int64(14), pr.Rows)
	require.Zero(t, pr.Reconciled)
	require.Equal(t, 1, pr.Unreconciled)
	require.Len(t, w.live("articles"), 30, "a resumed run never reconciles")

	// A full run does.
	require.Equal(t, int64(2), w.backfill(w.reconciling(7, st), cp, emb, st).Progress().Reconciled)
	require.Len(t, w.live("articles"), 28)
}

// TestReconcileDryRunCountsOnly: a dry run counts the documents a real run
// would delete, and writes nothing.
func TestReconcileDryRunCountsOnly(t *testing.T) {
	w := newWorld(t)
	w.seed(25)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	w.backfill(w.reconciling(10, st), nil, emb, st)
	_, err := w.src.Exec(ctx, "DELETE FROM "+w.table()+" WHERE id IN (1, 12, 25)")
	require.NoError(t, err)
	before := w.docs("articles")

	dry := backfill.NewDryRun(st, emb.Dimensions())
	pr := w.backfill(w.reconciling(10, st), nil, dry, dry).Progress()
	require.Equal(t, int64(3), pr.Reconciled, "what a real run would delete")
	require.Equal(t, before, w.docs("articles"), "a dry run writes nothing")

	require.Equal(t, int64(3), w.backfill(w.reconciling(10, st), nil, emb, st).Progress().Reconciled)
	require.Len(t, w.live("articles"), 22)
}
