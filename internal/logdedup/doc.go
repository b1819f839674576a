// Package logdedup collapses repeated identical log records into one line
// with a count: a slog.Handler wrapper for the commands' loggers, so that a
// dead dependency that fails every request reads as one warning and a count
// instead of a flood. It must not drop a record whose content differs, nor a
// count: pending counts are written when their window ends or on Flush.
package logdedup
