package embedder

import (
	"context"
	"time"
)

// SetSleep replaces the wait between attempts, so tests can record the
// waits the client chose without spending them.
func SetSleep(o *OpenAI, f func(ctx context.Context, d time.Duration) error) { o.sleep = f }
