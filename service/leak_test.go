package service_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/service"
)

// TestMain fails the run if any goroutine is still alive once every test has
// finished and cleaned up.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTracingStopEndsTheExporter: with OTLP configured, the function
// SetupTracing returns flushes the spans still batched and stops the batch
// processor, so serve leaves nothing running when it returns.
func TestTracingStopEndsTheExporter(t *testing.T) {
	var posts atomic.Int32
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	defer collector.Close()
	before := goleak.IgnoreCurrent() // the collector's, and other tests'
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	stop, err := service.SetupTracing(t.Context(), slog.New(slog.DiscardHandler), "test")
	require.NoError(t, err)
	_, span := otel.Tracer("test").Start(t.Context(), "apply")
	span.End()
	require.NoError(t, stop(context.Background()))
	require.Positive(t, posts.Load(), "stop flushes the batched span to the collector")

	// The exporter's idle keep-alive connection belongs to net/http and
	// ends when the collector closes it.
	collector.Close()
	goleak.VerifyNone(t, before)
}

// TestTracingRefusesBadResourceAttributes: a malformed
// OTEL_RESOURCE_ATTRIBUTES is refused naming the variable and the form it
// takes, and the exporter already built is ended, not left running.
func TestTracingRefusesBadResourceAttributes(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer collector.Close()
	before := goleak.IgnoreCurrent()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment")
	_, err := service.SetupTracing(t.Context(), slog.New(slog.DiscardHandler), "test")
	require.ErrorContains(t, err, "OTEL_RESOURCE_ATTRIBUTES")
	require.ErrorContains(t, err, "key=value")
	collector.Close()
	goleak.VerifyNone(t, before)
}
