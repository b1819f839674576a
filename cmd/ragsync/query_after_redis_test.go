package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// query --via redis --after: answered once serve's watermark (the file's
// last applied line) passes the position, else status not_yet and exit
// code ExitNotYet.
func TestQueryViaRedisAfter(t *testing.T) {
	cfg := frontDoorWorld(t)

	out, _, err := runCtx(t.Context(), "query", "--via", "redis", "--timeout", "5s", "--after", "1", "--config", cfg, "tide pools")
	require.NoError(t, err)
	require.Contains(t, out, "status ok")
	require.Contains(t, out, "public.articles/1")

	out, _, err = runCtx(t.Context(), "query", "--via", "redis", "--after-timeout", "1s", "--after", "99", "--config", cfg, "tide pools")
	require.ErrorIs(t, err, errNotYet)
	require.Equal(t, ExitNotYet, exitCode(err))
	require.Contains(t, out, "status not_yet")
	require.Contains(t, out, "short of 99")
	require.NotContains(t, out, "public.articles/1", "no hits with not_yet")

	_, _, err = runCtx(t.Context(), "query", "--via", "redis", "--timeout", "2s", "--after", "soon", "--config", cfg, "tide pools")
	require.ErrorContains(t, err, "after: \"soon\" is neither a position")
	require.False(t, errors.Is(err, errNotYet))
}
