package fallback

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// startMissSpan starts the span of a request that missed the cache (the
// embed and pgvector search), continuing the client's W3C traceparent. It
// is a no-op unless serve installed a tracer provider.
func startMissSpan(ctx context.Context, traceparent string) (context.Context, trace.Span) {
	if traceparent != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
	}
	return otel.Tracer("github.com/ragsync/ragsync/fallback").Start(ctx, "ragsync.frontdoor.search")
}
