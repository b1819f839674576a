package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUpstreamVectors: the vectors of -vectors-url's endpoint come back in
// input order whatever order the endpoint lists them in, and an endpoint
// that fails, answers with another size or loses a vector is an error that
// says so, never a vector of the wrong model.
func TestUpstreamVectors(t *testing.T) {
	var reply func(w http.ResponseWriter, input []string)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/v1/embeddings", r.URL.Path)
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&req))
		require.Equal(t, "m", req.Model)
		reply(w, req.Input)
	}))
	defer srv.Close()
	type item struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	answer := func(items ...item) func(http.ResponseWriter, []string) {
		return func(w http.ResponseWriter, _ []string) {
			_ = json.NewEncoder(w).Encode(map[string]any{"data": items})
		}
	}
	vectors := upstreamVectors(srv.URL+"/v1/", "m")

	reply = answer(item{1, []float32{0, 1}}, item{0, []float32{1, 0}})
	got, err := vectors([]string{"a", "b"}, 2)
	require.NoError(t, err)
	require.Equal(t, [][]float32{{1, 0}, {0, 1}}, got)

	_, err = vectors([]string{"a", "b"}, 3)
	require.ErrorContains(t, err, "set -dimensions to the model's size")

	reply = answer(item{0, []float32{1, 0}})
	_, err = vectors([]string{"a", "b"}, 2)
	require.ErrorContains(t, err, "1 vectors for 2 texts")

	reply = answer(item{0, []float32{1, 0}}, item{0, []float32{0, 1}})
	_, err = vectors([]string{"a", "b"}, 2)
	require.ErrorContains(t, err, "vector 0 twice")

	reply = func(w http.ResponseWriter, _ []string) {
		http.Error(w, "model not loaded", http.StatusServiceUnavailable)
	}
	_, err = vectors([]string{"a"}, 2)
	require.ErrorContains(t, err, "503")
	require.ErrorContains(t, err, "model not loaded")
}
