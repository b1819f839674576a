package sink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// Found by the convergence property test (tests/convergence_test.go): a
// delete of a document the index never saw, older than a truncate that was
// applied first, used to insert a tombstone below the truncate's fence, and
// a create between the delete and the truncate then brought the document
// back although the truncate removed it.
func TestDeleteUnderTruncateFence(t *testing.T) {
	s, _ := setup(t)
	ctx := t.Context()
	_, err := s.Truncate(ctx, "public.articles", ver(100), time.Time{})
	require.NoError(t, err)

	out, err := s.Delete(ctx, "public.articles", "1", ver(50), time.Time{})
	require.NoError(t, err)
	require.Equal(t, sink.Outcome{Stale: true}, out)

	out, err = s.Upsert(ctx, doc("1", 60, chunks("a")))
	require.NoError(t, err)
	require.True(t, out.Stale)
	_, found, err := s.Document(ctx, "public.articles/1")
	require.NoError(t, err)
	require.False(t, found)

	// Past the fence a delete still leaves its tombstone.
	out, err = s.Delete(ctx, "public.articles", "2", ver(150), time.Time{})
	require.NoError(t, err)
	require.True(t, out.Applied)
}
