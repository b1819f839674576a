package monitor

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// traceIDFromContext is the trace id of ctx's span, "" without one.
func traceIDFromContext(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
