package service

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// otlpConfigured says whether the standard OTLP variables ask for traces.
func otlpConfigured() bool {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// SetupTracing installs an OTLP/HTTP trace exporter when
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) is set; the exporter
// reads the other OTEL_EXPORTER_OTLP_* variables itself (headers, timeout,
// compression, insecure). Without them tracing stays off and spans cost a
// no-op. The returned func flushes and stops the exporter. OpenTelemetry's
// own messages (export failures) go to logger, through the redactor,
// instead of its default logger, which prints to stderr past it.
func SetupTracing(ctx context.Context, logger *slog.Logger, version string) (func(context.Context) error, error) {
	otelLogs := logger.With("stage", "tracing")
	otel.SetLogger(logr.FromSlogHandler(otelLogs.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		otelLogs.Warn("opentelemetry failed; check OTEL_EXPORTER_OTLP_ENDPOINT", "error", err)
	}))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if !otlpConfigured() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w (unset it to run without tracing)", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "ragsync"),
		attribute.String("service.version", version)), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx) // nothing was exported yet; end its client
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w (write key=value pairs separated by commas, or unset them)", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// TraceLogs adds the trace id of the record's context to every log line, so
// a warning leads to its trace.
type TraceLogs struct{ slog.Handler }

func (h TraceLogs) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h TraceLogs) WithAttrs(as []slog.Attr) slog.Handler { return TraceLogs{h.Handler.WithAttrs(as)} }
func (h TraceLogs) WithGroup(name string) slog.Handler    { return TraceLogs{h.Handler.WithGroup(name)} }
