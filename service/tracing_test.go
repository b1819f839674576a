package service

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragsync/ragsync/monitor"
)

// TestTraceIDInLogs: a warning logged with a span's context carries the
// trace id in the log line and in the monitor's warnings ring (and so in
// the fused events).
func TestTraceIDInLogs(t *testing.T) {
	var out bytes.Buffer
	ring := monitor.NewLogRing(slog.NewJSONHandler(&out, nil), 10)
	logger := slog.New(TraceLogs{ring}).With("stage", "pipeline")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	logger.WarnContext(ctx, "message dead-lettered")
	logger.Warn("no span here")
	require.Contains(t, out.String(), `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`)
	got := ring.Recent(0)
	require.Len(t, got, 2)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", got[0].TraceID)
	require.Empty(t, got[1].TraceID)
}

func TestOTLPOnlyWhenConfigured(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	require.False(t, otlpConfigured())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	require.True(t, otlpConfigured())
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	require.False(t, otlpConfigured())
}
