package sink_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// srcAt is a Postgres version of source src at lsn, committed at ms.
func srcAt(src string, lsn, ms uint64) cdc.Version {
	return cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{lsn}, TS: ms, Source: src}
}

// TestMovedSourceIsNotFrozen: after a dump/restore or an upgrade the
// server's WAL positions restart far below the old server's. A change of
// the new server (another source) is ordered by commit time against the
// old server's documents, so it applies, and a delete too; a replay of the
// new server's own change stays a no-op.
func TestMovedSourceIsNotFrozen(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	const old, moved = "pg:111/app", "pg:222/app"

	out, err := s.Upsert(ctx, docAt("1", srcAt(old, 9_000_000, 1000), "a"))
	require.NoError(t, err)
	require.True(t, out.Applied)
	out, err = s.Upsert(ctx, docAt("2", srcAt(old, 9_000_100, 1000), "b"))
	require.NoError(t, err)
	require.True(t, out.Applied)

	out, err = s.Upsert(ctx, docAt("1", srcAt(moved, 50, 2000), "a2"))
	require.NoError(t, err)
	require.True(t, out.Applied, "the new server's edit applies: its position says nothing against the old server's")
	out, err = s.Upsert(ctx, docAt("1", srcAt(moved, 50, 2000), "a2"))
	require.NoError(t, err)
	require.True(t, out.Duplicate, "a replay within the new source is a no-op")
	out, err = s.Delete(ctx, "public.articles", "2", srcAt(moved, 60, 2001), time.UnixMilli(2001))
	require.NoError(t, err)
	require.True(t, out.Applied, "the new server's delete applies")

	// The positions of one source still order its changes: an older
	// change of the new server is stale.
	out, err = s.Upsert(ctx, docAt("1", srcAt(moved, 40, 2500), "a1"))
	require.NoError(t, err)
	require.True(t, out.Stale)
}

// TestTruncateFencesOnlyItsSource: a truncate of public.articles in one
// database neither deletes the documents another database wrote to the
// same table name, nor fences out that database's later creates.
func TestTruncateFencesOnlyItsSource(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	const a, b = "pg:111/a", "pg:111/b"
	_, err := s.Upsert(ctx, docAt("a1", srcAt(a, 100, 1000), "x"))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, docAt("b1", srcAt(b, 90, 1000), "y"))
	require.NoError(t, err)

	n, err := s.Truncate(ctx, "public.articles", srcAt(a, 200, 3000), time.UnixMilli(3000))
	require.NoError(t, err)
	require.Equal(t, 1, n, "only database a's document is truncated")
	d, ok, err := s.Document(ctx, sink.DocID("public.articles", "b1"))
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, d.Deleted, "database b's document stays")

	out, err := s.Upsert(ctx, docAt("b2", srcAt(b, 150, 2000), "z"))
	require.NoError(t, err)
	require.True(t, out.Applied, "a's truncate does not fence b's create")
	out, err = s.Upsert(ctx, docAt("a2", srcAt(a, 150, 2000), "w"))
	require.NoError(t, err)
	require.True(t, out.Stale, "a's truncate still fences a's own older create")
}

// TestReconcileAcrossSourcesProperty drives random interleavings of four
// sources writing one index under one table name (two databases of one
// cluster sharing its LSNs, a database on another cluster with low
// positions, and a Debezium connector), with random full loads that
// reconcile, replays of old changes and deletes. After every step the
// index's live documents are exactly the union of each source's current
// rows, and no reconcile ever picks a document whose row still exists in
// its own source, or a document of another source.
func TestReconcileAcrossSourcesProperty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t)
			rng := rand.New(rand.NewPCG(seed, 42))
			type source struct {
				id   string
				next func() uint64 // the next WAL position
				rows map[string]string
				hist []sink.Document
			}
			var clusterLSN uint64 = 5_000_000 // shared by one cluster's databases
			shared := func() uint64 { clusterLSN += uint64(1 + rng.IntN(50)); return clusterLSN }
			var otherLSN uint64 = 100
			other := func() uint64 { otherLSN += uint64(1 + rng.IntN(50)); return otherLSN }
			var dbzLSN uint64 = 1_000
			dbz := func() uint64 { dbzLSN += uint64(1 + rng.IntN(50)); return dbzLSN }
			srcs := []*source{
				{id: cdc.PostgresSource(111, "a"), next: shared, rows: map[string]string{}},
				{id: cdc.PostgresSource(111, "b"), next: shared, rows: map[string]string{}},
				{id: cdc.PostgresSource(222, "a"), next: other, rows: map[string]string{}},
				{id: "dbz:shard3/app", next: dbz, rows: map[string]string{}},
			}
			clock := uint64(1_700_000_000_000)
			tick := func() uint64 { clock += uint64(1 + rng.IntN(3)); return clock }

			check := func(step int) {
				t.Helper()
				want := map[string]bool{}
				for _, src := range srcs {
					for k := range src.rows {
						want[k] = true
					}
				}
				got := map[string]bool{}
				require.NoError(t, s.LiveVersions(ctx, "public.articles", func(key string, _ cdc.Version) error {
					got[key] = true
					return nil
				}))
				require.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)), "step %d: the index is the union of the sources' rows", step)
			}

			for step := range 250 {
				src := srcs[rng.IntN(len(srcs))]
				key := fmt.Sprintf("%s#%d", src.id, rng.IntN(6))
				switch op := rng.IntN(10); {
				case op < 5: // write a row
					content := fmt.Sprintf("c%d", step)
					v := srcAt(src.id, src.next(), tick())
					d := docAt(key, v, content)
					out, err := s.Upsert(ctx, d)
					require.NoError(t, err)
					require.True(t, out.Applied, "step %d: a new change of %s applies", step, src.id)
					src.rows[key] = content
					src.hist = append(src.hist, d)
				case op < 7: // delete a row
					if _, ok := src.rows[key]; !ok {
						continue
					}
					ms := tick()
					out, err := s.Delete(ctx, "public.articles", key, srcAt(src.id, src.next(), ms), time.UnixMilli(int64(ms)))
					require.NoError(t, err)
					require.True(t, out.Applied, "step %d: a delete of %s applies", step, src.id)
					delete(src.rows, key)
				case op < 8: // a replay of an old change is a no-op
					if len(src.hist) == 0 {
						continue
					}
					out, err := s.Upsert(ctx, src.hist[rng.IntN(len(src.hist))])
					require.NoError(t, err)
					require.False(t, out.Applied, "step %d: a replay never applies", step)
				default: // a full load of src, then its reconcile
					load := srcAt(src.id, src.next()-1, tick())
					load.Snapshot = true
					for _, k := range slices.Sorted(maps.Keys(src.rows)) {
						_, err := s.Upsert(ctx, docAt(k, load, src.rows[k]))
						require.NoError(t, err)
					}
					var gone []string
					census, err := cdc.Outdated(ctx, s, "public.articles", load, cdc.OutdatedOptions{}, func(k string) error {
						gone = append(gone, k)
						return nil
					})
					require.NoError(t, err)
					for _, k := range gone {
						require.True(t, strings.HasPrefix(k, src.id+"#"), "step %d: %s's reconcile picked %s, another source's document", step, src.id, k)
						_, live := src.rows[k]
						require.False(t, live, "step %d: reconcile picked %s, whose row exists", step, k)
						out, err := s.Delete(ctx, "public.articles", k, load, time.UnixMilli(int64(load.TS)))
						require.NoError(t, err)
						require.True(t, out.Applied)
					}
					require.Equal(t, len(gone), census.Outdated)
				}
				check(step)
			}
		})
	}
}

// TestReconcileLeavesUnknownSourcesAlone: a document stored before
// versions named their source is never reconciled (nothing proves which
// database wrote it), while one of the load's own source is.
func TestReconcileLeavesUnknownSourcesAlone(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	src := cdc.PostgresSource(111, "a")
	_, err := s.Upsert(ctx, docAt("legacy", pgAt(100, 1000), "l"))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, docAt("own", srcAt(src, 100, 1000), "o"))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, docAt("moved-from", srcAt("pg:99/a", 100, 1000), "m"))
	require.NoError(t, err)
	var gone []string
	census, err := cdc.Outdated(ctx, s, "public.articles", srcAt(src, 500, 2000), cdc.OutdatedOptions{}, func(k string) error { gone = append(gone, k); return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"own"}, gone)
	require.Equal(t, cdc.Census{Live: 3, Outdated: 1, Foreign: 1, Unknown: 1}, census)

	// After an adopted move from pg:99/a, the old identity's documents
	// are the load's own, older ones.
	gone = nil
	_, err = cdc.Outdated(ctx, s, "public.articles", srcAt(src, 500, 2000), cdc.OutdatedOptions{Succeeds: []string{"pg:99/a"}}, func(k string) error { gone = append(gone, k); return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"moved-from", "own"}, slices.Sorted(slices.Values(gone)))

	// Claimed, the unknown one is judged by position, as before.
	gone = nil
	census, err = cdc.Outdated(ctx, s, "public.articles", srcAt(src, 500, 2000), cdc.OutdatedOptions{ClaimUnknown: true}, func(k string) error { gone = append(gone, k); return nil })
	require.NoError(t, err)
	require.Equal(t, []string{"legacy", "own"}, slices.Sorted(slices.Values(gone)))
	require.Equal(t, cdc.Census{Live: 3, Outdated: 2, Foreign: 1}, census)
}
