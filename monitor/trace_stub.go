package monitor

import "context"

// traceIDFromContext is replaced when tracing is wired (trace.go).
func traceIDFromContext(context.Context) string { return "" }
