package cdc

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

var positionalKinds = []string{KindPostgres, KindMySQL, KindSQLServer, KindOracle, KindMongo}

func pos(kind string, ts uint64, snapshot bool, parts ...uint64) Version {
	return Version{Kind: kind, Parts: parts, TS: ts, Snapshot: snapshot}
}

func tsv(ms uint64, snapshot bool, parts ...uint64) Version {
	return Version{Kind: KindTS, Parts: append([]uint64{ms}, parts...), TS: ms, Snapshot: snapshot}
}

// TestVersionCompareAcrossKinds checks the ordering rules for every pair
// of kinds, snapshot or streamed: a later commit wins whatever the kinds
// (so a snapshot read loses to a change committed after it); at the same
// commit time a ts fallback never outranks a real position, and between two
// ts versions a snapshot read loses to a change.
func TestVersionCompareAcrossKinds(t *testing.T) {
	t.Parallel()
	all := append([]string{KindTS}, positionalKinds...)
	mk := func(kind string, ts uint64, snap bool) Version {
		if kind == KindTS {
			return tsv(ts, snap)
		}
		// Positions chosen against the clock: a later commit carries a
		// smaller position than the other kind's, so only time can order.
		return pos(kind, ts, snap, 1_000_000-ts)
	}
	for _, a := range all {
		for _, b := range all {
			for _, snapA := range []bool{false, true} {
				for _, snapB := range []bool{false, true} {
					name := fmt.Sprintf("%s(snap=%v)/%s(snap=%v)", a, snapA, b, snapB)
					t.Run(name, func(t *testing.T) {
						if a == b && a != KindTS {
							// Same positional kind: parts decide, see below.
							return
						}
						older, newer := mk(a, 1000, snapA), mk(b, 1001, snapB)
						require.Equal(t, -1, older.Compare(newer), "a later commit wins: %s vs %s", older, newer)
						require.Equal(t, 1, newer.Compare(older))

						x, y := mk(a, 1000, snapA), mk(b, 1000, snapB)
						got := x.Compare(y)
						require.Equal(t, -got, y.Compare(x), "antisymmetric")
						switch {
						case a == KindTS && b != KindTS:
							require.Equal(t, -1, got, "ts never outranks a position")
						case a != KindTS && b == KindTS:
							require.Equal(t, 1, got)
						case a == b && snapA == snapB: // ts vs ts: a tie
							require.Equal(t, 0, got)
						case a == b && snapA:
							require.Equal(t, -1, got, "a snapshot read loses to a change in the same ms")
						case a == b:
							require.Equal(t, 1, got)
						default:
							require.NotEqual(t, 0, got, "different kinds never tie")
						}
					})
				}
			}
		}
	}
}

// TestVersionComparePositionalSameKind: within one kind the source position
// decides, even against a clock that stepped back; at one position a
// snapshot read sorts first; a prefix sorts first (the contract the
// backfill and the Postgres replication source rely on).
func TestVersionComparePositionalSameKind(t *testing.T) {
	t.Parallel()
	for _, k := range positionalKinds {
		t.Run(k, func(t *testing.T) {
			require.Equal(t, -1, pos(k, 2000, false, 10).Compare(pos(k, 1000, false, 11)), "position beats a clock step back")
			require.Equal(t, -1, pos(k, 0, false, 10).Compare(pos(k, 5, false, 10, 0)), "prefix first")
			require.Equal(t, -1, pos(k, 5, true, 10).Compare(pos(k, 5, false, 10, 0)), "snapshot at the prefix first")
			require.Equal(t, -1, pos(k, 5, true, 10).Compare(pos(k, 5, false, 10)), "snapshot before a change at its position")
			require.Equal(t, -1, pos(k, 5, true, 10).Compare(pos(k, 1, true, 11)))
			require.Equal(t, 0, pos(k, 5, false, 10, 3).Compare(pos(k, 7, false, 10, 3)), "same position, same change")
			require.True(t, pos(k, 0, false, 1).Positional())
		})
	}
	require.False(t, tsv(5, false).Positional())
	require.Equal(t, -1, tsv(5, false).Compare(tsv(5, false, 2)), "ts with a transaction order after the bare tie")
	require.Equal(t, -1, tsv(5, false, 1).Compare(tsv(5, false, 2)))
}

// TestVersionCompareUnknownTime: a version without a commit time (stored
// by older releases, or built without SourceTS) compares by rank across
// kinds, so a position still outranks a ts fallback.
func TestVersionCompareUnknownTime(t *testing.T) {
	t.Parallel()
	old := Version{Kind: KindPostgres, Parts: []uint64{99}}
	require.Equal(t, 1, old.Compare(tsv(5_000_000, false)))
	require.Equal(t, -1, tsv(5_000_000, false).Compare(old))
	// A ts version without TS still has its time in its first part.
	require.Equal(t, -1, Version{Kind: KindTS, Parts: []uint64{10}}.Compare(pos(KindPostgres, 11, false, 1)))
}

// TestVersionOrderIsTotal checks antisymmetry and transitivity over random
// versions whose positions and commit times agree within each kind, as
// they do for one document of one source.
func TestVersionOrderIsTotal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(10, 10))
	var vs []Version
	for range 120 {
		ts := uint64(r.IntN(20) + 1)
		snap := r.IntN(3) == 0
		k := r.IntN(len(positionalKinds) + 1)
		if k == len(positionalKinds) {
			vs = append(vs, tsv(ts, snap))
			continue
		}
		// Position = time*10 + noise: monotone in time within the kind.
		vs = append(vs, pos(positionalKinds[k], ts, snap, ts*10+uint64(r.IntN(10))))
	}
	for _, a := range vs {
		require.Equal(t, 0, a.Compare(a))
		for _, b := range vs {
			ab := a.Compare(b)
			require.Equal(t, -ab, b.Compare(a), "%s vs %s", a, b)
			if ab > 0 {
				continue
			}
			for _, c := range vs {
				if b.Compare(c) <= 0 {
					require.LessOrEqual(t, a.Compare(c), 0, "%s <= %s <= %s", a, b, c)
				}
			}
		}
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      string
		want    Version
		wantErr bool
	}{
		{name: "old form, no commit time", in: "pg:00000000016b3f40", want: Version{Kind: KindPostgres, Parts: []uint64{0x16b3f40}}},
		{name: "old multi-part", in: "mysql:0000000000000003.0000000000000416.0000000000000002", want: Version{Kind: KindMySQL, Parts: []uint64{3, 1046, 2}}},
		{name: "with time", in: "pg:00000000016b3f40;ts=1700000000000", want: Version{Kind: KindPostgres, Parts: []uint64{0x16b3f40}, TS: 1700000000000}},
		{name: "snapshot", in: "ts:0000018bcfe56800;ts=1700000000000;snapshot", want: Version{Kind: KindTS, Parts: []uint64{1700000000000}, TS: 1700000000000, Snapshot: true}},
		{name: "no parts", in: "pg:", want: Version{Kind: KindPostgres}},
		{name: "no kind", in: ":00", wantErr: true},
		{name: "no colon", in: "pg", wantErr: true},
		{name: "bad hex", in: "pg:zz", wantErr: true},
		{name: "bad ts", in: "pg:01;ts=x", wantErr: true},
		{name: "zero ts", in: "pg:01;ts=0", wantErr: true},
		{name: "unknown attribute", in: "pg:01;color=red", wantErr: true},
		{name: "repeated attribute", in: "pg:01;snapshot;snapshot", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseVersion(tc.in)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, 0, got.Compare(tc.want))
			back, err := ParseVersion(got.String())
			require.NoError(t, err)
			require.Equal(t, got, back, "round trip")
		})
	}
}

// TestVersionSourceRoundTrip: a version's source and epoch survive the
// stored text, escapes included, and old texts still parse as an unknown
// source.
func TestVersionSourceRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range []Version{
		{Kind: KindPostgres, Parts: []uint64{1, 2}, TS: 5, Source: "pg:7316/app"},
		{Kind: KindPostgres, Parts: []uint64{1}, Snapshot: true, Source: "dbz:srv;x%/db", Epoch: 3},
		{Kind: KindTS, Parts: []uint64{9}, TS: 9, Source: "dbz:s/d"},
	} {
		got, err := ParseVersion(v.String())
		require.NoError(t, err, v.String())
		require.Equal(t, v, got)
	}
	old, err := ParseVersion("pg:0000000000000001;ts=5")
	require.NoError(t, err)
	require.Empty(t, old.Source)
	for _, bad := range []string{"pg:01;src=a%2", "pg:01;epoch=0", "pg:01;src=a;src=b", "pg:01;epoch=x"} {
		_, err := ParseVersion(bad)
		require.Error(t, err, bad)
	}
}

// TestVersionCompareAcrossSources: positions of different sources never
// order each other (only commit times do), an unknown source is ordered as
// before, and a higher epoch of one source wins whatever the positions.
func TestVersionCompareAcrossSources(t *testing.T) {
	t.Parallel()
	a := Version{Kind: KindPostgres, Parts: []uint64{9000}, TS: 100, Source: "pg:1/app"}
	moved := Version{Kind: KindPostgres, Parts: []uint64{10}, TS: 200, Source: "pg:2/app"}
	require.True(t, a.Foreign(moved))
	require.Equal(t, -1, a.Compare(moved), "the later commit wins across sources")
	require.Equal(t, 1, moved.Compare(a))
	legacy := Version{Kind: KindPostgres, Parts: []uint64{9000}, TS: 100}
	require.False(t, legacy.Foreign(moved))
	require.Equal(t, 1, legacy.Compare(moved), "an unknown source is ordered by position, as before")

	e0 := Version{Kind: KindPostgres, Parts: []uint64{9000}, TS: 100, Source: "dbz:s/app"}
	e1 := Version{Kind: KindPostgres, Parts: []uint64{10}, TS: 50, Source: "dbz:s/app", Epoch: 1}
	require.Equal(t, -1, e0.Compare(e1), "a higher epoch wins within a source")

	fence := Version{Kind: KindPostgres, Parts: []uint64{10_000}, TS: 300, Source: "pg:1/app"}
	require.True(t, a.FencedBy(fence))
	require.False(t, moved.FencedBy(fence), "another source's truncate fences nothing of this one")

	x := Version{Kind: KindPostgres, Parts: []uint64{1}, TS: 7, Source: "pg:1/a"}
	y := Version{Kind: KindPostgres, Parts: []uint64{2}, TS: 7, Source: "pg:1/b"}
	require.Equal(t, -x.Compare(y), y.Compare(x), "foreign versions at one time still order totally")
	require.NotZero(t, x.Compare(y))
}

// TestReconcileLimit: the limit's forms, and what it lets through.
func TestReconcileLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         string
		gone, live int
		want       bool
	}{
		{"10%", 20, 20, false},
		{"10%", 5, 20, true}, // up to five always pass
		{"10%", 10, 100, true},
		{"10%", 11, 100, false},
		{"0.5", 50, 100, true},
		{"0.5", 51, 100, false},
		{"500", 500, 501, true},
		{"500", 501, 10000, false},
		{"0", 1, 10, false},
	} {
		l, err := ParseReconcileLimit(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, l.Allows(tc.gone, tc.live), "%s: %d of %d", tc.in, tc.gone, tc.live)
	}
	for _, bad := range []string{"", "x", "150%", "1.5", "-1"} {
		_, err := ParseReconcileLimit(bad)
		require.Error(t, err, bad)
	}
	err := CheckReconcile("public.articles", []string{"1", "2", "3", "4", "5", "6"}, 6, DefaultReconcileLimit)
	var refused *ReconcileRefused
	require.ErrorAs(t, err, &refused)
	require.Contains(t, err.Error(), "would delete 6 of its 6 documents (100%)")
	require.Contains(t, err.Error(), "--reconcile-max 6 or --yes")
	require.NoError(t, CheckReconcile("t", []string{"1"}, 6, ReconcileLimit{Unlimited: true}))
}
