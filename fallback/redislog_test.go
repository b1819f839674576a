package fallback

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedisLogsAreJSON: go-redis's printf lines become slog debug records,
// so serve's JSON log stays one JSON object a line and they show only with
// log.level: debug.
func TestRedisLogsAreJSON(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})).With("stage", "redis")}
	l.Printf(context.Background(), "redis: %s:%d: connection pool: %s\n", "127.0.0.1", 6379, "dial failed")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	require.Equal(t, "redis: 127.0.0.1:6379: connection pool: dial failed", rec["msg"])
	require.Equal(t, "redis", rec["stage"])
	require.Equal(t, "DEBUG", rec["level"])
}
