package file

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/ragsync/ragsync/cdc"
)

// textOrBase64 returns b as text when it is valid UTF-8, else as base64;
// both nil for nil b (a tombstone, a null key).
func textOrBase64(b []byte) (text, b64 *string) {
	if b == nil {
		return nil, nil
	}
	s := string(b)
	if utf8.Valid(b) {
		return &s, nil
	}
	s = base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// DeadLetters appends dead letters to a JSON Lines file in kcat's -J
// shape, which the file source reads back: fix the config, then replay the
// file with `serve --once`.
type DeadLetters struct {
	mu      sync.Mutex
	path    string
	version string
}

// NewDeadLetters appends to path, creating it on first use.
func NewDeadLetters(path, version string) *DeadLetters {
	return &DeadLetters{path: path, version: version}
}

// Path is where dead letters go.
func (d *DeadLetters) Path() string { return d.path }

// Put appends one dead letter and syncs the file. Key, value and header
// values that are not valid UTF-8 cannot sit in a JSON string without being
// changed (encoding/json writes U+FFFD), so they are written base64-encoded
// as key_base64, payload_base64 and headers_base64 instead, which the file
// source reads back byte for byte.
func (d *DeadLetters) Put(_ context.Context, m cdc.Record, cause error) error {
	b, err := fileLine(m, cdc.DeadLetterHeaders(m, cause, d.version))
	if err != nil {
		return fmt.Errorf("encode dead letter: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return appendSynced(d.path, b)
}

// fileLine renders m with headers hs as one kcat -J line (no newline),
// the shape ParseLine reads back. Key, value and header values that are
// not valid UTF-8 go base64-encoded (key_base64, payload_base64,
// headers_base64) so that they come back byte for byte.
func fileLine(m cdc.Record, hs []cdc.Header) ([]byte, error) {
	textual := !slices.ContainsFunc(hs, func(h cdc.Header) bool { return !utf8.Valid(h.Value) })
	flat := []string{}
	for _, h := range hs {
		v := string(h.Value)
		if !textual {
			v = base64.StdEncoding.EncodeToString(h.Value)
		}
		flat = append(flat, h.Key, v)
	}
	line := struct {
		Topic         string   `json:"topic"`
		Partition     int32    `json:"partition"`
		Offset        int64    `json:"offset"`
		TS            int64    `json:"ts,omitempty"`
		Key           *string  `json:"key"`
		KeyB64        *string  `json:"key_base64,omitempty"`
		Payload       *string  `json:"payload"`
		PayloadB64    *string  `json:"payload_base64,omitempty"`
		Headers       []string `json:"headers,omitempty"`
		HeadersBase64 []string `json:"headers_base64,omitempty"`
	}{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	if textual {
		line.Headers = flat
	} else {
		line.HeadersBase64 = flat
	}
	if !m.Timestamp.IsZero() {
		line.TS = m.Timestamp.UnixMilli()
	}
	line.Key, line.KeyB64 = textOrBase64(m.Key)
	val := m.Value
	if val == nil && m.Change != nil {
		// A change a transport built itself (the Postgres source) has no
		// bytes of its own: the dead letter keeps the change as JSON.
		b, err := json.Marshal(m.Change)
		if err != nil {
			return nil, err
		}
		val = b
	}
	line.Payload, line.PayloadB64 = textOrBase64(val)
	return json.Marshal(line)
}

// appendSynced appends lines (each without its newline) to path, creating
// it, and syncs before returning so an acknowledged dead letter survives a
// crash.
func appendSynced(path string, lines ...[]byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	var buf []byte
	for _, l := range lines {
		buf = append(append(buf, l...), '\n')
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}
