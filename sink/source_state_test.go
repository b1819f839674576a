package sink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// TestSourceStateRecordsLoadsAndCreations: a load record round-trips (its
// tables in order, progress, fence), is done when nothing is pending, and
// is forgotten; what ragsync created is recorded per kind, database and
// name.
func TestSourceStateRecordsLoadsAndCreations(t *testing.T) {
	_, b := setup(t)
	ctx := context.Background()
	st := sink.NewSourceState(b.pool)

	r, err := st.Load(ctx, "s1")
	require.NoError(t, err)
	require.False(t, r.Exists)

	want := sink.SourceLoad{Loaded: []string{"public.a"}, Pending: []string{"s.z", "s-x.a"}, Table: "s.z", Key: []string{"7"}, Fenced: true}
	require.NoError(t, st.SaveLoad(ctx, "s1", want))
	r, err = st.Load(ctx, "s1")
	require.NoError(t, err)
	want.Exists = true
	require.Equal(t, want, r)
	var done bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT done_at IS NOT NULL FROM source_loads WHERE slot = 's1'").Scan(&done))
	require.False(t, done, "a load with tables pending is not done")

	require.NoError(t, st.SaveLoad(ctx, "s1", sink.SourceLoad{Loaded: []string{"public.a", "s.z", "s-x.a"}}))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT done_at IS NOT NULL FROM source_loads WHERE slot = 's1'").Scan(&done))
	require.True(t, done)

	// A row written before the table lists were kept: done means every
	// table (Loaded nil), unfinished means start over (nothing loaded).
	_, err = b.pool.Exec(ctx, "INSERT INTO source_loads (slot, done_at) VALUES ('old', now()), ('cut', NULL)")
	require.NoError(t, err)
	r, err = st.Load(ctx, "old")
	require.NoError(t, err)
	require.True(t, r.Exists)
	require.Nil(t, r.Loaded)
	r, err = st.Load(ctx, "cut")
	require.NoError(t, err)
	require.Equal(t, []string{}, r.Loaded)
	require.Empty(t, r.Pending)

	require.NoError(t, st.ForgetLoad(ctx, "s1"))
	r, err = st.Load(ctx, "s1")
	require.NoError(t, err)
	require.False(t, r.Exists)

	ok, err := st.Created(ctx, "slot", "app", "ragsync")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, st.RecordCreated(ctx, "slot", "app", "ragsync"))
	require.NoError(t, st.RecordCreated(ctx, "slot", "app", "ragsync"))
	ok, _ = st.Created(ctx, "slot", "app", "ragsync")
	require.True(t, ok)
	ok, _ = st.Created(ctx, "slot", "other", "ragsync")
	require.False(t, ok, "per database")
	ok, _ = st.Created(ctx, "publication", "app", "ragsync")
	require.False(t, ok, "per kind")
	require.NoError(t, st.ForgetCreated(ctx, "slot", "app", "ragsync"))
	ok, _ = st.Created(ctx, "slot", "app", "ragsync")
	require.False(t, ok)
}

// TestLiveVersionsListsATablesLiveDocuments: only live documents of the
// table, with their versions.
func TestLiveVersionsListsATablesLiveDocuments(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	for i, key := range []string{"1", "2", "3"} {
		_, err := s.Upsert(ctx, doc(key, uint64(10+i), nil))
		require.NoError(t, err)
	}
	_, err := s.Delete(ctx, "public.articles", "2", ver(20), docTime)
	require.NoError(t, err)
	got := map[string]string{}
	require.NoError(t, s.LiveVersions(ctx, "public.articles", func(key string, v cdc.Version) error {
		got[key] = v.String()
		return nil
	}))
	require.Equal(t, map[string]string{"1": ver(10).String(), "3": ver(12).String()}, got)
	require.NoError(t, s.LiveVersions(ctx, "public.other", func(string, cdc.Version) error {
		t.Fatal("no documents of another table")
		return nil
	}))
}
