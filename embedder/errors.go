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

// DimensionError reports vectors of the wrong size: the model does not
// produce what the index stores. It is permanent.
type DimensionError struct {
	Model     string
	Got, Want int
}

func (e *DimensionError) Error() string {
	return fmt.Sprintf("model %q returned %d dimensions, want %d: set embedder.dimensions to %d or choose a model that outputs %d",
		e.Model, e.Got, e.Want, e.Got, e.Want)
}

// Permanent is always true: retrying returns the same size.
func (e *DimensionError) Permanent() bool { return true }

// ResponseError reports a reply that does not match the request (wrong
// number of vectors, bad or repeated index). It is retried: a proxy or a
// server bug may not repeat.
type ResponseError struct {
	Model  string
	Reason string
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("embeddings API reply for model %q: %s", e.Model, e.Reason)
}

// InputError reports a text that cannot be embedded, such as an empty one
// (OpenAI rejects empty inputs). It is permanent.
type InputError struct {
	Index  int
	Reason string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("input %d: %s", e.Index, e.Reason)
}

// Permanent is always true.
func (e *InputError) Permanent() bool { return true }

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
