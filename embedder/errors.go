package embedder

import (
	"errors"
	"fmt"
	"net/http"
)

// APIError is an error status from the embeddings API. Callers classify it
// with errors.As and Permanent, never by its message.
type APIError struct {
	StatusCode int
	Model      string
	Message    string // the API's own message, if it sent one
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("embeddings API returned %d %s for model %q", e.StatusCode, http.StatusText(e.StatusCode), e.Model)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	switch e.StatusCode {
	case http.StatusUnauthorized:
		msg += " (set OPENAI_API_KEY / embedder.api_key to a valid key)"
	case http.StatusNotFound:
		msg += " (check embedder.model and embedder.base_url)"
	}
	return msg
}

// Permanent reports whether retrying the same request cannot succeed: any
// 4xx except 408 Request Timeout, 409 Conflict and 429 Too Many Requests.
func (e *APIError) Permanent() bool {
	switch e.StatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return false
	}
	return e.StatusCode >= 400 && e.StatusCode < 500
}

// Transient reports a status that may pass if the same request is sent
// again later (5xx, 408, 409, 429): the provider is down or busy.
func (e *APIError) Transient() bool { return !e.Permanent() }

// Fatal reports a status every request would get: a bad or missing key
// (401), a key without access (403), an unknown model or endpoint (404).
// The run stops with it instead of dead-lettering every document.
func (e *APIError) Fatal() bool {
	switch e.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// DimensionError reports a model whose answers are not the size the index
// stores: every vector of an answer had the same wrong size, so the model
// (or the server behind the name) is not the one the index was built with.
// It is permanent, and serve stops on it: changing embedder.dimensions
// would not fit the stored vectors.
type DimensionError struct {
	Model     string
	Got, Want int
	// Sent says the request asked for Want dimensions
	// (embedder.send_dimensions) and the server ignored it.
	Sent bool
}

func (e *DimensionError) Error() string {
	msg := fmt.Sprintf("model %q returned %d-dimension vectors, the index stores %d (embedder.dimensions): set embedder.model (and embedder.base_url) to the model this index was built with, or build a new index for this model with `ragsync reindex --to NEW --model %s --dimensions %d`",
		e.Model, e.Got, e.Want, e.Model, e.Got)
	if e.Sent {
		return msg + "; the request asked for " + fmt.Sprint(e.Want) + " dimensions and the server ignored it"
	}
	return msg + "; if the model shortens vectors on request, set embedder.send_dimensions: always"
}

// Permanent is always true: retrying returns the same size.
func (e *DimensionError) Permanent() bool { return true }

// Fatal is always true: every answer of the model has the wrong size.
func (e *DimensionError) Fatal() bool { return true }

// ResponseError reports a reply that does not match the request: the
// wrong number of vectors, a bad or repeated index, or a body over the
// response cap. The OpenAI client does not retry it at the same size: it
// halves the request until the inputs that draw it stand alone, and an
// input still answered badly alone, after the retries, fails with an
// InputError. It is not permanent: a proxy or a server bug may not repeat.
type ResponseError struct {
	Model  string
	Reason string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("embeddings API reply for model %q: %s", e.Model, e.Reason)
}

// Permanent is false: the same request may be answered well next time.
func (e *ResponseError) Permanent() bool { return false }

// InputError reports a text that cannot be embedded: an empty one (OpenAI
// rejects empty inputs), one over embedder.max_input_tokens with
// on_too_long: dead_letter, or one the server answers badly whenever it is
// sent (a vector of another size than its neighbours', or a reply that
// does not match the request even alone). Index is the text's position in
// the call. It is permanent: the caller dead-letters the document that
// carries the text, and no other.
type InputError struct {
	Index  int
	Reason string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("input %d: %s", e.Index, e.Reason)
}

// Permanent is always true.
func (e *InputError) Permanent() bool { return true }

// Input is always true: the text itself is what the provider refuses (or
// answers with a vector that cannot be searched), so a caller holding a
// query answers its sender at once (fault.Input).
func (e *InputError) Input() bool { return true }

// ErrClosed is returned by a Coalescer's calls after Close.
var ErrClosed = errors.New("embedder: coalescer closed")

// EncodingError reports a server that does not answer in the configured
// embedder.encoding_format: every request would fail the same way, so it is
// permanent and serve stops on it rather than dead-letter every document.
type EncodingError struct {
	Model string
	Err   error // what the server answered
}

func (e *EncodingError) Error() string {
	return fmt.Sprintf("embeddings API for model %q does not answer in base64 (%v): set embedder.encoding_format: auto or float", e.Model, e.Err)
}

func (e *EncodingError) Unwrap() error { return e.Err }

// Permanent is always true.
func (e *EncodingError) Permanent() bool { return true }

// Fatal is always true: every request would fail the same way.
func (e *EncodingError) Fatal() bool { return true }
