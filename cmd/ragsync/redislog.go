package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisLogger routes go-redis's printf logging (pool and reconnect notices)
// into slog, so serve's JSON log stays one JSON object a line.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.WarnContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// routeRedisLogs installs logger as go-redis's process-wide logger; go-redis
// has no per-client logger.
func routeRedisLogs(logger *slog.Logger) {
	redis.SetLogger(redisLogger{logger.With("stage", "redis")})
}
