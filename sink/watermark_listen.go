package sink

import (
	"context"
	"fmt"
)

// ListenMarks calls changed each time a watermark of this index is
// written (a notification on WatermarkChannel), until ctx ends (it then
// returns ctx's error) or the connection fails. It holds one connection,
// taken out of the pool for as long as it listens, so that one process
// can serve any number of waiters from one LISTEN: the query front door
// runs one per process, and WaitAfter one per Store, each re-reading
// Watermarks when it is called.
// changed must not block; notifications sent while the connection was
// being set up or was down are not replayed, so the caller also re-reads
// from time to time.
func (s *Store) ListenMarks(ctx context.Context, changed func()) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen for watermarks: %w", err)
	}
	// A connection that listened goes back to no pool: closing it ends
	// the LISTEN with it.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN "+WatermarkChannel); err != nil {
		return fmt.Errorf("listen for watermarks: %w", err)
	}
	want := s.cfg.Schema + "." + s.cfg.Index
	// A write between the caller's last read and LISTEN is not notified
	// to us: tell the caller to read once now that we listen.
	changed()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("listen for watermarks: %w", err)
		}
		if n.Payload == want {
			changed()
		}
	}
}
