package openaitest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// Options configure a Server. The zero value serves any model with 16
// dimensions, no auth and no limits.
type Options struct {
	// Dimensions is the vector size when a request has no "dimensions".
	// Defaults to 16.
	Dimensions int
	// APIKey, if set, is required as "Authorization: Bearer <key>" (or an
	// "api-key" header, as Azure sends); otherwise the reply is 401.
	APIKey string
	// MaxInputs, if > 0, rejects requests with more inputs with a 400, like
	// OpenAI's 2048 limit.
	MaxInputs int
	// MaxTokens, if > 0, rejects requests with more cl100k_base tokens in
	// total with a 400, like OpenAI's 300k limit.
	MaxTokens int
	// Models, if set, lists the models served; others get a 404.
	Models []string
	// NoBase64 makes the server one that lacks encoding_format base64:
	// "ignore" answers with JSON numbers whatever was asked, "reject"
	// refuses the parameter with a 400. Empty supports it.
	NoBase64 string
	// Vectors, if set, computes the vectors in place of the hashing
	// embedder, as a real model behind the fake would: a benchmark can
	// measure retrieval with a real model's vectors while the server keeps
	// counting requests, inputs and tokens. dims is the size asked for.
	Vectors func(texts []string, dims int) ([][]float32, error)
	// Limits, if set, enforce requests and tokens per minute as a
	// provider does (limits.go).
	Limits Limits
	// Batch configures the Batch API (batch.go).
	Batch BatchOptions
}

// Fault changes how the server answers one request. Status and Drop replace
// the answer; Delay and Dimensions modify a normal one.
type Fault struct {
	// Status, if non-zero, is returned with an OpenAI-style error body.
	Status int
	// Message, if set, is that body's message in place of "injected
	// fault <status>": e.g. one quoting the API key, as OpenAI's 401 does.
	Message string
	// RetryAfter is sent as the Retry-After header (seconds or an HTTP date).
	RetryAfter string
	// Header adds arbitrary response headers (retry-after-ms,
	// x-ratelimit-reset-requests…).
	Header http.Header
	// Delay holds the reply back; the handler gives up early if the client
	// goes away.
	Delay time.Duration
	// Drop closes the connection without answering.
	Drop bool
	// Dimensions, if > 0, makes the vectors this long whatever was asked.
	Dimensions int
	// Lengths makes the vector of input i Lengths[i] long: one bad vector
	// among good ones.
	Lengths map[int]int
	// Fill makes every entry of input i's vector Fill[i]: 0 answers a
	// zero vector, NaN or ±Inf one that is not finite (sent as base64,
	// which can carry them; JSON numbers cannot).
	Fill map[int]float32
	// Short leaves the last Short vectors out of the answer.
	Short int
	// Long appends Long vectors whose indexes are past the inputs.
	Long int
	// Padded keeps the answer's length but gives its last Padded vectors
	// index 0 again, as a server that pads a short answer would.
	Padded int
	// BodyBytes, if > 0, answers 200 with a body of that many bytes: a JSON
	// vector that never ends. Server.BodyWritten counts what the client
	// let the server write of it.
	BodyBytes int64
}

// Request is one request as the server decoded it.
type Request struct {
	Model          string
	Input          []string
	Dimensions     int
	EncodingFormat string
}

// Server is a running fake. Counters are safe to read at any time; they
// count every embeddings request received (Requests) and what was served
// successfully (Inputs, Tokens); the Batch API's calls and the texts of its
// batches are counted apart (BatchCounts).
type Server struct {
	// URL is the base URL to configure as embedder.base_url (ends in /v1).
	URL string

	Requests atomic.Int64
	Inputs   atomic.Int64
	Tokens   atomic.Int64
	// BodyWritten counts the bytes of Fault.BodyBytes bodies that were
	// written to a client (accepted by the connection).
	BodyWritten atomic.Int64

	opts   Options
	srv    *httptest.Server
	mu     sync.Mutex
	faults []Fault
	hook   func(r Request) *Fault
	xform  func(model, text string, v []float32) []float32
	served []Request // successful requests, in order
	lim    *limiter  // nil without Options.Limits
	batch  batchState
}

// New starts a Server that is closed when t ends.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dimensions == 0 {
		opts.Dimensions = 16
	}
	s := &Server{opts: opts, lim: newLimiter(opts.Limits)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.srv.Close)
	return s
}

// FailNext makes the next n requests fail (or slow down) as f says.
func (s *Server) FailNext(n int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults = append(s.faults, f)
	}
}

// SetHook installs f to pick a fault (or nil) for each request once the
// faults queued by FailNext are used up. f runs on server goroutines.
func (s *Server) SetHook(f func(r Request) *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = f
}

// SetTransform installs f to change each served vector, given the model
// name and the input text: a model swapped behind the same name, or noise.
// nil restores the plain hashing vectors. f runs on server goroutines.
func (s *Server) SetTransform(f func(model, text string, v []float32) []float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.xform = f
}

// Served returns the requests answered successfully, in arrival order.
func (s *Server) Served() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.served...)
}

// BatchSizes returns the input count of every successful request.
func (s *Server) BatchSizes() []int {
	var out []int
	for _, r := range s.Served() {
		out = append(out, len(r.Input))
	}
	return out
}

func (s *Server) nextFault(r Request) *Fault {
	s.mu.Lock()
	if len(s.faults) > 0 {
		f := s.faults[0]
		s.faults = s.faults[1:]
		s.mu.Unlock()
		return &f
	}
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		return hook(r)
	}
	return nil
}

type wireRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions"`
	EncodingFormat string          `json:"encoding_format"`
}

type wireEmbedding struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or a base64 string
}

type wireResponse struct {
	Object string          `json:"object"`
	Data   []wireEmbedding `json:"data"`
	Model  string          `json:"model"`
	Usage  struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil},
	})
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if s.serveBatch(w, r) {
		return // the Batch API's routes; Requests counts embeddings requests
	}
	s.Requests.Add(1)
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/embeddings") {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
		return
	}
	if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey &&
		r.Header.Get("api-key") != s.opts.APIKey {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "Incorrect API key provided.")
		return
	}
	var wr wireRequest
	if err := json.NewDecoder(r.Body).Decode(&wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	req := Request{Model: wr.Model, Dimensions: wr.Dimensions, EncodingFormat: wr.EncodingFormat}
	if req.EncodingFormat == "base64" && s.opts.NoBase64 == "reject" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Unrecognized request argument supplied: encoding_format")
		return
	}
	if err := decodeInput(wr.Input, &req.Input); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if s.lim != nil && !s.lim.admit(w, req.Input) {
		return
	}

	f := s.nextFault(req)
	if f != nil && f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if f != nil {
		for k, vs := range f.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		if f.Drop {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler) // aborts the response without a reply
		}
		if f.Status != 0 {
			msg := f.Message
			if msg == "" {
				msg = fmt.Sprintf("injected fault %d", f.Status)
			}
			writeError(w, f.Status, "server_error", msg)
			return
		}
		if f.BodyBytes > 0 {
			s.writeHuge(w, f.BodyBytes)
			return
		}
	}

	if req.Model == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "you must provide a model parameter")
		return
	}
	if len(s.opts.Models) > 0 && !contains(s.opts.Models, req.Model) {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("The model `%s` does not exist", req.Model))
		return
	}
	if len(req.Input) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "'$.input' is invalid: empty")
		return
	}
	if s.opts.MaxInputs > 0 && len(req.Input) > s.opts.MaxInputs {
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("'$.input' is invalid: %d inputs, at most %d allowed", len(req.Input), s.opts.MaxInputs))
		return
	}
	tokens := 0
	for i, in := range req.Input {
		if in == "" {
			writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("'$.input[%d]' is invalid: empty string", i))
			return
		}
		tokens += chunker.CountTokens(in)
	}
	if s.opts.MaxTokens > 0 && tokens > s.opts.MaxTokens {
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("Requested %d tokens, max %d tokens per request", tokens, s.opts.MaxTokens))
		return
	}

	dims := s.opts.Dimensions
	if req.Dimensions > 0 {
		dims = req.Dimensions
	}
	if f != nil && f.Dimensions > 0 {
		dims = f.Dimensions
	}
	var vecs [][]float32
	var err error
	if s.opts.Vectors != nil {
		vecs, err = s.opts.Vectors(req.Input, dims)
		if err == nil && len(vecs) != len(req.Input) {
			err = fmt.Errorf("the vectors hook gave %d vectors for %d inputs", len(vecs), len(req.Input))
		}
	} else {
		vecs, err = embedder.NewHashing(dims).Embed(context.Background(), req.Input)
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	if f != nil {
		for i, n := range f.Lengths {
			if i >= 0 && i < len(vecs) {
				v, err := embedder.NewHashing(n).Embed(context.Background(), req.Input[i:i+1])
				if err != nil {
					writeError(w, http.StatusInternalServerError, "server_error", err.Error())
					return
				}
				vecs[i] = v[0]
			}
		}
	}
	if f != nil {
		for i, x := range f.Fill {
			if i >= 0 && i < len(vecs) {
				for j := range vecs[i] {
					vecs[i][j] = x
				}
			}
		}
	}
	s.mu.Lock()
	xform := s.xform
	s.mu.Unlock()
	if xform != nil {
		for i := range vecs {
			vecs[i] = xform(req.Model, req.Input[i], vecs[i])
		}
	}
	resp := wireResponse{Object: "list", Model: req.Model}
	resp.Usage.PromptTokens, resp.Usage.TotalTokens = tokens, tokens
	for i, v := range vecs {
		e := wireEmbedding{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" && s.opts.NoBase64 == "" {
			e.Embedding = encodeBase64(v)
		}
		resp.Data = append(resp.Data, e)
	}
	if f != nil {
		resp.Data = resp.Data[:max(len(resp.Data)-f.Short, 0)]
		for k := range f.Long {
			e := resp.Data[len(resp.Data)-1]
			e.Index = len(vecs) + k
			resp.Data = append(resp.Data, e)
		}
		for k := 0; k < f.Padded && k < len(resp.Data)-1; k++ {
			resp.Data[len(resp.Data)-1-k].Index = 0
		}
	}
	s.mu.Lock()
	s.served = append(s.served, req)
	s.mu.Unlock()
	s.Inputs.Add(int64(len(req.Input)))
	s.Tokens.Add(int64(tokens))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// writeHuge answers 200 with n bytes: the start of an answer, then a
// vector that never ends, written in chunks until n or until the client
// stops reading. BodyWritten counts what the connection accepted.
func (s *Server) writeHuge(w http.ResponseWriter, n int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	head := []byte(`{"object":"list","model":"huge","data":[{"object":"embedding","index":0,"embedding":[0`)
	chunk := bytes.Repeat([]byte(",0.125"), 64<<10/6)
	written, err := w.Write(head)
	s.BodyWritten.Add(int64(written))
	for left := n - int64(written); err == nil && left > 0; {
		c := chunk[:min(int64(len(chunk)), left)]
		written, err = w.Write(c)
		s.BodyWritten.Add(int64(written))
		left -= int64(written)
	}
}

// decodeInput accepts input as a string or an array of strings, as the
// API does; token arrays are not supported by this fake.
func decodeInput(raw json.RawMessage, out *[]string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return fmt.Errorf("'$.input' is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("'$.input' is invalid: %v", err)
		}
		*out = []string{s}
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("'$.input' is invalid: want a string or an array of strings: %v", err)
	}
	return nil
}

// encodeBase64 packs v as little-endian float32s, the format OpenAI uses
// for encoding_format=base64.
func encodeBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
