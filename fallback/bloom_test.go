package fallback

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBloom(t *testing.T) {
	rdb, prefix := redisForTest(t)
	ctx := t.Context()
	b := NewBloom(rdb, prefix, "idx", BloomConfig{Bits: 1 << 20, Hashes: 7})

	ok, err := b.MayContain(ctx, KindTenant, "anyone")
	require.NoError(t, err)
	require.True(t, ok, "an unbuilt filter rejects nothing")
	require.NoError(t, b.Add(ctx, KindTenant, "early"))
	ok, err = b.MayContain(ctx, KindTenant, "anyone")
	require.NoError(t, err)
	require.True(t, ok, "Add before the first rebuild does not half-build the filter")

	const n = 10000
	count, err := b.Rebuild(ctx, func(add func(string, string) error) error {
		for i := range n {
			if err := add(fmt.Sprint("tenant-", i%100), fmt.Sprint("t/", i)); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, n, count)
	for i := range n {
		if i%100 == 0 {
			ok, err := b.MayContain(ctx, KindDoc, fmt.Sprint("t/", i))
			require.NoError(t, err)
			require.True(t, ok, "no false negatives")
		}
	}
	ok, err = b.MayContain(ctx, KindTenant, "tenant-42")
	require.NoError(t, err)
	require.True(t, ok)

	// Hashing is deterministic, so the false-positive count is too; with
	// 10k docs in 2^20 bits and 7 hashes the expected rate is ~1e-5.
	fp := 0
	for i := range 2000 {
		ok, err := b.MayContain(ctx, KindDoc, fmt.Sprint("absent/", i))
		require.NoError(t, err)
		if ok {
			fp++
		}
	}
	require.LessOrEqual(t, fp, 2)

	ok, err = b.MayContain(ctx, KindTenant, "newcomer")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.Add(ctx, KindTenant, "newcomer"))
	ok, err = b.MayContain(ctx, KindTenant, "newcomer")
	require.NoError(t, err)
	require.True(t, ok, "the sink's Add is visible at once")

	require.Error(t, b.Add(ctx, "colour", "x"))
	_, err = b.MayContain(ctx, "colour", "x")
	require.Error(t, err)
}
