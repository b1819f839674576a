package sink

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnWait adds up the time a piece of work waited for a pooled
// connection, so that a caller can tell the wait from the transaction
// itself (ragsync_sink_conn_wait_seconds beside
// ragsync_sink_tx_duration_seconds). Safe for concurrent use.
type ConnWait struct{ ns atomic.Int64 }

// Duration is the total wait so far.
func (w *ConnWait) Duration() time.Duration { return time.Duration(w.ns.Load()) }

type connWaitKey struct{}
type acquireStartKey struct{}

// TrackConnWait returns a context under which every connection acquired
// from a pool opened by OpenPool adds its wait to the returned ConnWait.
func TrackConnWait(ctx context.Context) (context.Context, *ConnWait) {
	w := &ConnWait{}
	return context.WithValue(ctx, connWaitKey{}, w), w
}

// connWaitTracer is the pool's tracer: it measures Acquire for the
// contexts TrackConnWait made, and nothing else (queries are not traced).
type connWaitTracer struct{}

var _ pgxpool.AcquireTracer = connWaitTracer{}

func (connWaitTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (connWaitTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (connWaitTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	if ctx.Value(connWaitKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, acquireStartKey{}, time.Now())
}

func (connWaitTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireEndData) {
	w, ok := ctx.Value(connWaitKey{}).(*ConnWait)
	start, ok2 := ctx.Value(acquireStartKey{}).(time.Time)
	if ok && ok2 {
		w.ns.Add(int64(time.Since(start)))
	}
}

// defaultMaxConns is the pool size when postgres.url does not set
// pool_max_conns: the pipeline holds up to max_in_flight_documents
// documents, most of them waiting on the provider; those ready to write
// hold a connection for a few milliseconds each (lookup, transaction), so
// a handful of connections carries hundreds of documents a second, and
// pgx's own default (4 on a 2-core machine) made writers queue behind the
// lookups.
const defaultMaxConns = 8
