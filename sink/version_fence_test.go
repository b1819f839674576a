package sink_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// Versions of different kinds must not poison a
// document, and ties must not drop an edit.

const t0 = uint64(1700000000000)

func pgAt(lsn, ms uint64) cdc.Version {
	return cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{lsn}, TS: ms}
}

func tsAt(ms uint64) cdc.Version {
	return cdc.Version{Kind: cdc.KindTS, Parts: []uint64{ms}, TS: ms}
}

func docAt(key string, v cdc.Version, hashes ...string) sink.Document {
	d := doc(key, 0, chunks(hashes...))
	d.Version = v
	d.SourceTS = time.UnixMilli(int64(v.TS)).UTC()
	return d
}

// TestPositionlessChangeDoesNotFreeze: in the old text form a "ts" version
// sorted after every "pg" one ("pg" < "ts"), so after one change without
// an LSN every later Postgres change was Stale, forever.
func TestPositionlessChangeDoesNotFreeze(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	steps := []struct {
		v    cdc.Version
		hash string
		want sink.Outcome
	}{
		{pgAt(100, t0), "a", sink.Outcome{Applied: true, Inserted: 1}},
		{tsAt(t0 + 10), "b", sink.Outcome{Applied: true, Inserted: 1, Removed: 1}},    // no LSN: by time
		{pgAt(200, t0+20), "c", sink.Outcome{Applied: true, Inserted: 1, Removed: 1}}, // was Stale when versions compared as text
		{tsAt(t0 + 15), "old", sink.Outcome{Stale: true}},                             // committed before the stored change
		{pgAt(150, t0+5), "old", sink.Outcome{Stale: true}},
		{tsAt(t0 + 20), "tie", sink.Outcome{Stale: true}}, // same ms as a position: the position wins
	}
	for i, st := range steps {
		out, err := s.Upsert(ctx, docAt("1", st.v, st.hash))
		require.NoError(t, err, "step %d", i)
		require.Equal(t, st.want, out, "step %d: %s", i, st.v)
	}
	sd, _, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, sd.Hashes)
}

// TestPositionlessTieAppliesLaterArrival: two changes without a position
// in the same millisecond; the second used to be a Duplicate, its edit lost.
func TestPositionlessTieAppliesLaterArrival(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	out, err := s.Upsert(ctx, docAt("1", tsAt(t0), "first"))
	require.NoError(t, err)
	require.True(t, out.Applied)
	out, err = s.Upsert(ctx, docAt("1", tsAt(t0), "second"))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Inserted: 1, Removed: 1}, out)
	// A replay of the same content writes nothing new.
	out, err = s.Upsert(ctx, docAt("1", tsAt(t0), "second"))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Applied: true, Unchanged: 1}, out)

	sd, _, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.Equal(t, []string{"second"}, sd.Hashes)

	// A delete in the same ms arrives later: it wins too; a create tied
	// with the delete after it undeletes.
	out, err = s.Delete(ctx, "public.articles", "1", tsAt(t0), time.Time{})
	require.NoError(t, err)
	require.True(t, out.Applied)
	out, err = s.Delete(ctx, "public.articles", "1", tsAt(t0), time.Time{})
	require.NoError(t, err)
	require.True(t, out.Duplicate)
	out, err = s.Upsert(ctx, docAt("1", tsAt(t0), "third"))
	require.NoError(t, err)
	require.True(t, out.Applied)

	// Positional versions keep their duplicate check.
	out, err = s.Upsert(ctx, docAt("2", pgAt(5, t0), "x"))
	require.NoError(t, err)
	require.True(t, out.Applied)
	out, err = s.Upsert(ctx, docAt("2", pgAt(5, t0), "y"))
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Duplicate: true}, out)
}

// TestSnapshotReadLosesToLaterChange: a snapshot read (of any kind) that
// arrives after a streamed change committed later than the read is Stale;
// at one position the streamed change wins.
func TestSnapshotReadLosesToLaterChange(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, docAt("1", pgAt(500, t0+50), "streamed"))
	require.NoError(t, err)

	incremental := tsAt(t0 + 40)
	incremental.Snapshot = true
	out, err := s.Upsert(ctx, docAt("1", incremental, "snapshot"))
	require.NoError(t, err)
	require.True(t, out.Stale, "an incremental snapshot read older than the change")

	atPosition := pgAt(500, t0+50)
	atPosition.Snapshot = true
	out, err = s.Upsert(ctx, docAt("1", atPosition, "snapshot"))
	require.NoError(t, err)
	require.True(t, out.Stale, "a snapshot read at the change's own position")

	// The other way round: a snapshot read stored first, then a change
	// at its position.
	_, err = s.Upsert(ctx, docAt("2", atPosition, "snapshot"))
	require.NoError(t, err)
	out, err = s.Upsert(ctx, docAt("2", pgAt(500, t0+50), "streamed"))
	require.NoError(t, err)
	require.True(t, out.Applied)
}

// TestTruncateAcrossKinds: truncates compare versions in Go, by the same
// order as Upsert (the stored text no longer sorts across kinds).
func TestTruncateAcrossKinds(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, docAt("old", pgAt(10, t0), "a"))
	require.NoError(t, err)
	_, err = s.Upsert(ctx, docAt("later", tsAt(t0+100), "b"))
	require.NoError(t, err)

	n, err := s.Truncate(ctx, "public.articles", pgAt(50, t0+50), time.Time{})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the document committed before the truncate goes")
	old, _, err := s.Document(ctx, "public.articles/old")
	require.NoError(t, err)
	require.True(t, old.Deleted)
	later, _, err := s.Document(ctx, "public.articles/later")
	require.NoError(t, err)
	require.False(t, later.Deleted, "a ts version after the truncate stays (it sorted before \"ts\" text-wise)")

	// The fence: a create older than the truncate is Stale, a newer one of
	// another kind is not; an older truncate does not lower the fence.
	_, err = s.Truncate(ctx, "public.articles", tsAt(t0+10), time.Time{})
	require.NoError(t, err)
	out, err := s.Upsert(ctx, docAt("new1", tsAt(t0+40), "c"))
	require.NoError(t, err)
	require.True(t, out.Stale)
	out, err = s.Upsert(ctx, docAt("new2", tsAt(t0+60), "d"))
	require.NoError(t, err)
	require.True(t, out.Applied)
}

// TestStoredVersionWithoutCommitTime: a version stored in the old text form
// (no commit time) takes the row's source_ts as its time, so a later
// change without a position still applies.
func TestStoredVersionWithoutCommitTime(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	ctx := t.Context()
	_, err := s.Upsert(ctx, docAt("1", pgAt(100, t0), "a"))
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, fmt.Sprintf("UPDATE %s.documents SET version = $1 WHERE id = 'public.articles/1'", b.schema),
		cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{100}}.String())
	require.NoError(t, err)

	sd, _, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.Equal(t, t0, sd.Version.TS, "time from source_ts")

	out, err := s.Upsert(ctx, docAt("1", tsAt(t0-1), "older"))
	require.NoError(t, err)
	require.True(t, out.Stale)
	out, err = s.Upsert(ctx, docAt("1", tsAt(t0+1), "newer"))
	require.NoError(t, err)
	require.True(t, out.Applied)
}

// TestDocIDRejectsUnescapedTable: a table name must come from
// cdc.TableName, so that the first "/" of an id ends the table.
func TestDocIDRejectsUnescapedTable(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	d := docAt("7", pgAt(1, t0), "a")
	d.Table = "public.a/b"
	_, err := s.Upsert(t.Context(), d)
	require.ErrorIs(t, err, sink.ErrInvalidDocument)
	_, err = s.Delete(t.Context(), "public.a/b", "7", pgAt(1, t0), time.Time{})
	require.ErrorIs(t, err, sink.ErrInvalidDocument)
}
