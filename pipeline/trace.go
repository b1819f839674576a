package pipeline

import (
	"context"
	"slices"

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

// tracer follows the global provider, so the pipeline is traced exactly when
// serve installed one (OTEL_EXPORTER_OTLP_* set); otherwise spans are no-ops.
func tracer() trace.Tracer { return otel.Tracer("github.com/ragsync/ragsync/pipeline") }

// withTraceParent continues the W3C trace the producer started (the Kafka
// "traceparent" header, DESIGN.md rule 6); ctx is returned as is without one.
func withTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

func messageTraceParent(m cdc.Message) string {
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
func withTraceHeader(ctx context.Context, m cdc.Message) cdc.Message {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return m
	}
	m.Headers = append(slices.Clone(m.Headers), cdc.Header{Key: HeaderTraceID, Value: []byte(sc.TraceID().String())})
	return m
}
