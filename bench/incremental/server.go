package main

import (
	"fmt"
	"testing"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// embeddings is the embedding side of a run: ragsync's real OpenAI client
// talking HTTP to an in-process OpenAI-compatible server that counts every
// request, input and cl100k_base token it serves.
type embeddings struct {
	Embedder   *embedder.OpenAI
	Model      string
	Dimensions int

	srv  *openaitest.Server
	stop *tbShim
}

// tbShim lets openaitest.New, whose only constructor takes a testing.TB to
// register the server's shutdown, run inside a program. New calls only
// Helper and Cleanup; any other method would hit the nil embedded TB, so a
// change there shows up as a panic at start, not as a wrong figure.
type tbShim struct {
	testing.TB
	cleanups []func()
}

func (s *tbShim) Helper()          {}
func (s *tbShim) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// startEmbeddings starts the counting server and a client for it.
func startEmbeddings(cfg config) (*embeddings, error) {
	shim := &tbShim{}
	srv := openaitest.New(shim, openaitest.Options{Dimensions: cfg.Dimensions, APIKey: "bench-key"})
	e := &embeddings{srv: srv, stop: shim, Model: cfg.Model, Dimensions: cfg.Dimensions}
	client, err := embedder.NewOpenAI(embedder.Config{
		Provider:   embedder.ProviderOpenAI,
		BaseURL:    srv.URL,
		Model:      cfg.Model,
		Dimensions: cfg.Dimensions,
		APIKey:     "bench-key",
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	e.Embedder = client
	return e, nil
}

// Usage returns the server's counters so far.
func (e *embeddings) Usage() usage {
	return usage{Requests: e.srv.Requests.Load(), Inputs: e.srv.Inputs.Load(), Tokens: e.srv.Tokens.Load()}
}

// Close stops the client and the server.
func (e *embeddings) Close() {
	if e.Embedder != nil {
		e.Embedder.Close()
	}
	for i := len(e.stop.cleanups) - 1; i >= 0; i-- {
		e.stop.cleanups[i]()
	}
	e.stop.cleanups = nil
}

// Describe names the embedding setup for the report.
func (e *embeddings) Describe() string {
	return fmt.Sprintf("embedder.OpenAI -> internal/openaitest (%s, %d dims, feature-hashing vectors)", e.Model, e.Dimensions)
}
