package service_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

func TestFatalCoversPostgres(t *testing.T) {
	lost := &sink.FatalError{Err: &pgconn.PgError{Code: "42501"}, Fix: "grant it back"}
	require.True(t, service.Fatal(fmt.Errorf("upsert x: %w", lost)))
	require.False(t, service.Transient(fmt.Errorf("upsert x: %w", lost)))
	require.False(t, service.Fatal(&sink.DataError{Err: &pgconn.PgError{Code: "22021"}}))
	require.False(t, service.Fatal(errors.New("other")))
	// A server that does not speak the configured encoding fails every
	// document: stop instead of dead-lettering them all.
	require.True(t, service.Fatal(fmt.Errorf("embed: %w", &embedder.EncodingError{Model: "m", Err: errors.New("numbers")})))
}

// A reply that does not match its request is retried a bounded number of
// times and then dead-lettered, never retried for ever: a provider that
// answers one input badly must not stall the pipeline.
func TestBadReplyIsNotTransient(t *testing.T) {
	bad := fmt.Errorf("embed x: %w", &embedder.ResponseError{Model: "m", Reason: "1 vectors for 2 inputs"})
	require.False(t, service.Transient(bad))
	require.False(t, service.Fatal(bad))
	in := fmt.Errorf("embed x: %w", &embedder.InputError{Index: 3, Reason: "sent alone, the reply did not match it"})
	require.False(t, service.Transient(in))
	require.False(t, service.Fatal(in), "one input's fault dead-letters its document, it does not stop serve")
}
