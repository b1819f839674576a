package backfill_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// roleURL creates a login role of the test's own (dropped at cleanup) that
// may read the world's table and returns a URL that connects as it.
func (w *world) roleURL(extra string) string {
	w.t.Helper()
	ctx := context.Background()
	role := "r" + w.srcName
	ident := pgx.Identifier{role}.Sanitize()
	_, err := w.src.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN %s; GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT, UPDATE ON %s TO %s",
		ident, extra, w.srcName, ident, w.table(), ident))
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		_, err := w.src.Exec(context.Background(), fmt.Sprintf("DROP OWNED BY %s; DROP ROLE %s", ident, ident))
		if err != nil {
			w.t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(pgtest.URL())
	require.NoError(w.t, err)
	u.User = url.User(role)
	return u.String()
}

// loaded seeds n rows and backfills them, reconciling, into index
// articles with the hashing embedder, which it returns with the index.
func (w *world) loaded(n int) (embedder.Client, *sink.Store) {
	w.t.Helper()
	w.seed(n)
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	w.backfill(w.reconciling(6, st), nil, emb, st)
	require.Len(w.t, w.live("articles"), n)
	return emb, st
}

// TestReconcileRefusesARowLevelSecurityView: a backfill run by a role that
// reads the table through a row-level security policy sees 3 of 20 rows.
// Reconciling from that view would delete 17 live documents; the run is
// refused before it reads, naming the policy and the fixes, and deletes
// nothing. With --no-reconcile the role may load what it sees.
func TestReconcileRefusesARowLevelSecurityView(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	emb, st := w.loaded(20)

	_, err := w.src.Exec(ctx, "ALTER TABLE "+w.table()+" ENABLE ROW LEVEL SECURITY; CREATE POLICY tenant_only ON "+w.table()+" USING (id <= 3)")
	require.NoError(t, err)
	cfg := w.reconciling(6, st)
	cfg.URL = w.roleURL("")
	_, err = backfill.Open(ctx, cfg, nil)
	var filtered *cdc.ErrFilteredRead
	require.ErrorAs(t, err, &filtered)
	require.Contains(t, err.Error(), "tenant_only")
	require.Contains(t, err.Error(), "BYPASSRLS")
	require.Contains(t, err.Error(), "--no-reconcile")
	require.Len(t, w.live("articles"), 20, "nothing deleted")

	// Without reconciling, the role loads the rows it sees.
	cfg.Reconcile = nil
	pr := w.backfill(cfg, nil, emb, st).Progress()
	require.Equal(t, int64(3), pr.Rows)
	require.Len(t, w.live("articles"), 20)
}

// TestReconcileLeavesAnotherDatabasesDocuments: two databases of one
// cluster share its WAL positions, so a document another database wrote
// to the same table name at a lower LSN looks older than this snapshot.
// It is another source's: the backfill leaves it alone, and so a
// document written from another cluster, or by a Debezium connector.
func TestReconcileLeavesAnotherDatabasesDocuments(t *testing.T) {
	w := newWorld(t)
	w.seed(5)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	own, err := cdc.ReadPostgresSource(ctx, w.src)
	require.NoError(t, err)
	var sysid uint64
	_, err = fmt.Sscanf(own, "pg:%d/", &sysid)
	require.NoError(t, err)
	for i, src := range []string{cdc.PostgresSource(sysid, "another_db"), cdc.PostgresSource(sysid+1, "test"), "dbz:dbserver1/test"} {
		v := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{uint64(100 + i)}, TS: 1, Source: src}
		out, err := st.Upsert(ctx, sink.Document{Table: w.table(), Key: fmt.Sprint(1000 + i), Version: v, Row: map[string]any{"id": 1000 + i}})
		require.NoError(t, err)
		require.True(t, out.Applied)
	}
	pr := w.backfill(w.reconciling(6, st), nil, emb, st).Progress()
	require.Zero(t, pr.Reconciled)
	require.Equal(t, int64(3), pr.LeftAlone)
	require.Equal(t, own, pr.Source)
	require.Len(t, w.live("articles"), 8)
	require.Contains(t, w.docs("articles")[w.doc(1)].Version, ";src="+own, "the rows' versions name their source")
}

// TestReconcileStopsPastItsLimit: a reconcile that would delete more than
// its limit deletes nothing and says how many, with a sample of keys; a
// dry run reports the same refusal; --yes lets it through.
func TestReconcileStopsPastItsLimit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	emb, st := w.loaded(20)
	_, err := w.src.Exec(ctx, "DELETE FROM "+w.table()+" WHERE id > 5")
	require.NoError(t, err)

	src, err := backfill.Open(ctx, w.reconciling(6, st), nil)
	require.NoError(t, err)
	err = w.pipeline(src, emb, st).Run(ctx)
	src.Close()
	var refused *cdc.ReconcileRefused
	require.True(t, errors.As(err, &refused), "%v", err)
	require.Equal(t, 15, refused.Gone)
	require.Equal(t, 20, refused.Live)
	require.Len(t, refused.Sample, 10)
	require.Len(t, w.live("articles"), 20, "nothing deleted")

	dry := backfill.NewDryRun(st, emb.Dimensions())
	cfg := w.reconciling(6, st)
	cfg.DryRun = true
	pr := w.backfill(cfg, nil, dry, dry).Progress()
	require.Len(t, pr.Refused, 1)
	require.Equal(t, 15, pr.Refused[0].Gone)
	require.Zero(t, pr.Reconciled)

	cfg = w.reconciling(6, st)
	cfg.ReconcileLimit = &cdc.ReconcileLimit{Unlimited: true}
	require.Equal(t, int64(15), w.backfill(cfg, nil, emb, st).Progress().Reconciled)
	require.Len(t, w.live("articles"), 5)
}

// TestReconcileUnknownOnlyWhenAsked: a document stored before versions
// named their source (an old release's "pg:…" with no source) whose row is
// gone is left alone and counted, since nothing proves this database wrote
// it; ReconcileUnknown takes such documents as this database's and deletes
// the ones whose rows are gone, and never one whose row exists.
func TestReconcileUnknownOnlyWhenAsked(t *testing.T) {
	w := newWorld(t)
	w.seed(5)
	ctx := context.Background()
	emb := embedder.NewHashing(64)
	st := w.store("articles", emb)
	// An index an old release wrote: rows 1..5 and 99, whose row is gone
	// since, all at versions in the old text form.
	for _, key := range []string{"1", "2", "3", "4", "5", "99"} {
		v, err := cdc.ParseVersion("pg:0000000000000010")
		require.NoError(t, err)
		out, err := st.Upsert(ctx, sink.Document{Table: w.table(), Key: key, Version: v, Row: map[string]any{"id": key}})
		require.NoError(t, err)
		require.True(t, out.Applied, key)
	}
	pr := w.backfill(w.reconciling(6, st), nil, emb, st).Progress()
	require.Zero(t, pr.Reconciled)
	require.Equal(t, int64(1), pr.LeftAlone, "the unknown document whose row is gone")
	require.True(t, w.live("articles")[w.table()+"/99"])
	require.Contains(t, w.docs("articles")[w.doc(3)].Version, ";src=pg:", "the load labelled the rows it read")

	cfg := w.reconciling(6, st)
	cfg.ReconcileUnknown = true
	pr = w.backfill(cfg, nil, emb, st).Progress()
	require.Equal(t, int64(1), pr.Reconciled)
	live := w.live("articles")
	require.False(t, live[w.table()+"/99"], "claimed and gone")
	require.Len(t, live, 5, "rows that exist are never deleted")
}
