package fallback

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisLogger routes go-redis's printf logging (pool and reconnect notices)
// into slog at debug level, so serve's JSON log stays one JSON object a
// line, and a Redis that is down reads as ragsync's own message (which says
// what failed and the fix) instead of a burst of raw client lines before
// it; log.level: debug shows them.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// RouteRedisLogs installs logger as go-redis's process-wide logger; go-redis
// has no per-client logger.
func RouteRedisLogs(logger *slog.Logger) {
	redis.SetLogger(redisLogger{logger.With("stage", "redis")})
}
