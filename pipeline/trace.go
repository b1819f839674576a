package pipeline

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragsync/ragsync/cdc"
)

// HeaderTraceID carries the trace id of the failed apply on dead letters, so
// the dead letter leads to its trace.
const HeaderTraceID = "ragsync.trace_id"

// TraceRecorder hears of every change the pipeline finished with: the
// trace id of its apply (or of its decode, when it could not be decoded),
// how long that took and whether it failed (dead-lettered or stopped the
// pipeline). The monitor implements it to name the worst recent traces in
// its events. It is called from the workers, so it must be safe for
// concurrent use and must not block: the write path waits on it.
type TraceRecorder interface {
	RecordTrace(id trace.TraceID, d time.Duration, failed bool)
}

// recordTrace reports span's trace to the recorder, when there are both.
func (p *Pipeline) recordTrace(span trace.Span, start time.Time, failed bool) {
	if p.st.Traces == nil {
		return
	}
	if sc := span.SpanContext(); sc.HasTraceID() {
		p.st.Traces.RecordTrace(sc.TraceID(), time.Since(start), failed)
	}
}

// tracer follows the global provider, so the pipeline is traced exactly when
// serve installed one (OTEL_EXPORTER_OTLP_* set); otherwise spans are no-ops.
func tracer() trace.Tracer { return otel.Tracer("github.com/ragsync/ragsync/pipeline") }

// withTraceParent continues the W3C trace the producer started (the Kafka
// "traceparent" header); ctx is returned as is without one.
func withTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

func messageTraceParent(m cdc.Record) string {
	for _, h := range m.Headers {
		if h.Key == "traceparent" || h.Key == "Traceparent" {
			return string(h.Value)
		}
	}
	return ""
}

// endSpan records err on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func changeAttrs(ch cdc.Change) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String("ragsync.doc_id", DocID(ch)), attribute.String("ragsync.op", string(ch.Op)))
}

// withTraceHeader adds the trace id of ctx's span to a dead letter's
// headers.
func withTraceHeader(ctx context.Context, m cdc.Record) cdc.Record {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return m
	}
	m.Headers = append(slices.Clone(m.Headers), cdc.Header{Key: HeaderTraceID, Value: []byte(sc.TraceID().String())})
	return m
}

// traceID is the trace id of the change ctx applies (32 hex digits), ""
// when it has none: the chunk rows its write inserts record it.
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
