package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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

	srv      *openaitest.Server
	stop     *tbShim
	upstream string // VectorsURL: whose vectors the server serves
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
	opts := openaitest.Options{Dimensions: cfg.Dimensions, APIKey: "bench-key"}
	if cfg.VectorsURL != "" {
		opts.Vectors = upstreamVectors(cfg.VectorsURL, cfg.Model)
	}
	srv := openaitest.New(shim, opts)
	e := &embeddings{srv: srv, stop: shim, Model: cfg.Model, Dimensions: cfg.Dimensions, upstream: cfg.VectorsURL}
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
	if e.upstream != "" {
		return fmt.Sprintf("embedder.OpenAI -> internal/openaitest (%s, %d dims, the vectors of the model at %s)", e.Model, e.Dimensions, e.upstream)
	}
	return fmt.Sprintf("embedder.OpenAI -> internal/openaitest (%s, %d dims, feature-hashing vectors)", e.Model, e.Dimensions)
}

// upstreamVectors returns an openaitest.Options.Vectors that asks the
// OpenAI-compatible embeddings endpoint at base (…/v1) for the vectors of
// model, and checks that they have the size asked for.
func upstreamVectors(base, model string) func([]string, int) ([][]float32, error) {
	client := &http.Client{Timeout: 10 * time.Minute}
	return func(texts []string, dims int) ([][]float32, error) {
		body, err := json.Marshal(map[string]any{"model": model, "input": texts})
		if err != nil {
			return nil, err
		}
		resp, err := client.Post(strings.TrimSuffix(base, "/")+"/embeddings", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("-vectors-url: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return nil, fmt.Errorf("-vectors-url: %s: %s", resp.Status, msg)
		}
		var out struct {
			Data []struct {
				Index     int       `json:"index"`
				Embedding []float32 `json:"embedding"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, fmt.Errorf("-vectors-url: %w", err)
		}
		if len(out.Data) != len(texts) {
			return nil, fmt.Errorf("-vectors-url: %d vectors for %d texts", len(out.Data), len(texts))
		}
		vecs := make([][]float32, len(texts))
		for _, d := range out.Data {
			if d.Index < 0 || d.Index >= len(texts) || len(d.Embedding) != dims {
				return nil, fmt.Errorf("-vectors-url: vector %d of %d dimensions (want %d: set -dimensions to the model's size)", d.Index, len(d.Embedding), dims)
			}
			if vecs[d.Index] != nil {
				return nil, fmt.Errorf("-vectors-url: vector %d twice", d.Index)
			}
			vecs[d.Index] = d.Embedding
		}
		return vecs, nil
	}
}
