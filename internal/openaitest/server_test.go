package openaitest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

func client(s *openaitest.Server, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = s.URL
	return openai.NewClientWithConfig(cfg)
}

func TestServerSpeaksOpenAI(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{})
	want, err := embedder.NewHashing(8).Embed(t.Context(), []string{"a b", "c"})
	require.NoError(t, err)
	for _, format := range []openai.EmbeddingEncodingFormat{"", openai.EmbeddingEncodingFormatFloat, openai.EmbeddingEncodingFormatBase64} {
		t.Run(string(format), func(t *testing.T) {
			resp, err := client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{
				Input: []string{"a b", "c"}, Model: "m", Dimensions: 8, EncodingFormat: format})
			require.NoError(t, err)
			require.Equal(t, "list", resp.Object)
			require.Equal(t, openai.EmbeddingModel("m"), resp.Model)
			require.Len(t, resp.Data, 2)
			for i, d := range resp.Data {
				require.Equal(t, i, d.Index)
				require.Equal(t, "embedding", d.Object)
				require.Equal(t, want[i], d.Embedding)
			}
			require.Equal(t, 3, resp.Usage.PromptTokens)
			require.Equal(t, 3, resp.Usage.TotalTokens)
		})
	}
	require.Equal(t, int64(3), s.Requests.Load())
	require.Equal(t, int64(6), s.Inputs.Load())
	require.Equal(t, int64(9), s.Tokens.Load())
	require.Equal(t, []int{2, 2, 2}, s.BatchSizes())
}

func TestServerStringInputAndDefaultDims(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Dimensions: 5})
	resp, err := client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequest{Input: "just one", Model: "m"})
	require.NoError(t, err)
	require.Len(t, resp.Data, 1)
	require.Len(t, resp.Data[0].Embedding, 5)
	require.Equal(t, []string{"just one"}, s.Served()[0].Input)
}

func TestServerRejects(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{APIKey: "k", MaxInputs: 2, MaxTokens: 5, Models: []string{"m"}})
	tests := []struct {
		name   string
		path   string
		key    string
		body   string
		status int
	}{
		{name: "bad key", key: "nope", body: `{"model":"m","input":["a"]}`, status: 401},
		{name: "azure header ok", key: "azure:k", body: `{"model":"m","input":["a"]}`, status: 200},
		{name: "unknown route", path: "/v1/chat/completions", key: "k", body: `{}`, status: 404},
		{name: "bad json", key: "k", body: `{"model":`, status: 400},
		{name: "no model", key: "k", body: `{"input":["a"]}`, status: 400},
		{name: "unknown model", key: "k", body: `{"model":"x","input":["a"]}`, status: 404},
		{name: "token arrays unsupported", key: "k", body: `{"model":"m","input":[[1,2]]}`, status: 400},
		{name: "empty string", key: "k", body: `{"model":"m","input":["a",""]}`, status: 400},
		{name: "no input", key: "k", body: `{"model":"m","input":[]}`, status: 400},
		{name: "too many inputs", key: "k", body: `{"model":"m","input":["a","b","c"]}`, status: 400},
		{name: "too many tokens", key: "k", body: `{"model":"m","input":["a b c d e f g"]}`, status: 400},
		{name: "ok", key: "k", body: `{"model":"m","input":["a","b"]}`, status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/embeddings"
			}
			base := s.URL[:len(s.URL)-len("/v1")]
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, bytes.NewBufferString(tc.body))
			require.NoError(t, err)
			if k, ok := bytes.CutPrefix([]byte(tc.key), []byte("azure:")); ok {
				req.Header.Set("api-key", string(k))
			} else {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			var body map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			if tc.status != 200 {
				require.Contains(t, body, "error", "errors use OpenAI's error envelope")
			}
		})
	}
}

func TestServerFaults(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{})
	s.FailNext(1, openaitest.Fault{Status: 429, RetryAfter: "3", Header: http.Header{"Retry-After-Ms": {"3000"}}})
	s.FailNext(1, openaitest.Fault{Dimensions: 2})
	req := openai.EmbeddingRequestStrings{Input: []string{"a"}, Model: "m", Dimensions: 8}
	_, err := client(s, "").CreateEmbeddings(t.Context(), req)
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 429, apiErr.HTTPStatusCode)
	resp, err := client(s, "").CreateEmbeddings(t.Context(), req)
	require.NoError(t, err)
	require.Len(t, resp.Data[0].Embedding, 2)

	s.FailNext(1, openaitest.Fault{Drop: true})
	_, err = client(s, "").CreateEmbeddings(t.Context(), req)
	require.Error(t, err)

	var calls atomic.Int32
	s.SetHook(func(r openaitest.Request) *openaitest.Fault {
		calls.Add(1)
		if r.Input[0] == "fail" {
			return &openaitest.Fault{Status: 502}
		}
		return nil
	})
	_, err = client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{Input: []string{"fail"}, Model: "m"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 502, apiErr.HTTPStatusCode)
	_, err = client(s, "").CreateEmbeddings(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, int32(2), calls.Load())
	require.Equal(t, int64(5), s.Requests.Load())
	require.Equal(t, int64(2), s.Inputs.Load(), "only successful replies count inputs")
}

// TestServerServesVectorsOfItsHook: with Options.Vectors the server answers
// with the hook's vectors (a real model behind the fake), still counting
// what it serves, and a failing hook, or one that loses a vector, is a 500.
func TestServerServesVectorsOfItsHook(t *testing.T) {
	t.Parallel()
	var fail, short atomic.Bool
	s := openaitest.New(t, openaitest.Options{Vectors: func(texts []string, dims int) ([][]float32, error) {
		if fail.Load() {
			return nil, errors.New("model down")
		}
		if short.Load() {
			return [][]float32{make([]float32, dims)}, nil
		}
		out := make([][]float32, len(texts))
		for i, x := range texts {
			out[i] = make([]float32, dims)
			out[i][0] = float32(len(x))
		}
		return out, nil
	}})
	resp, err := client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{Input: []string{"ab", "cde"}, Model: "m", Dimensions: 4})
	require.NoError(t, err)
	require.Equal(t, []float32{2, 0, 0, 0}, resp.Data[0].Embedding)
	require.Equal(t, []float32{3, 0, 0, 0}, resp.Data[1].Embedding)
	require.Equal(t, int64(2), s.Inputs.Load())
	fail.Store(true)
	_, err = client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{Input: []string{"ab"}, Model: "m", Dimensions: 4})
	var apiErr *openai.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusInternalServerError, apiErr.HTTPStatusCode)
	fail.Store(false)
	short.Store(true)
	_, err = client(s, "").CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{Input: []string{"ab", "cde"}, Model: "m", Dimensions: 4})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusInternalServerError, apiErr.HTTPStatusCode)
	require.Contains(t, apiErr.Message, "1 vectors for 2 inputs")
}
