package file

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ragsync/ragsync/cdc"
)

// Config configures the JSON Lines source.
type Config struct {
	// Path is the file to read: one Debezium message a line, as a bare value,
	// as {"topic":…,"key":…,"value":…,"headers":…}, or as kcat's -J envelope
	// (key and payload as strings), so `kcat -C -J` dumps replay as they are.
	Path string
	// Follow keeps reading as the file grows instead of stopping at its end.
	Follow bool
	// BatchSize is the most lines handed over at once. Defaults to 256.
	BatchSize int
	// PollInterval is how often a followed file is checked for new lines.
	// Defaults to 500ms.
	PollInterval time.Duration
	// Decoder decodes each line's Debezium value as it is handed over
	// (Record.Change, or Record.Err with the reason): the pipeline decodes
	// nothing. Nil is a decoder with the default settings.
	Decoder *cdc.Decoder
}

// Source replays a JSON Lines file of Debezium messages. Positions are
// line numbers (1-based) in Message.Offset. Acknowledgement keeps nothing: a
// restart replays the file, and version fencing makes the replay a no-op.
type Source struct {
	cfg  Config
	f    *os.File
	r    *bufio.Reader
	line int64
	tail []byte // a partial last line while following

	name  string // the watermark's source: "file:" and the absolute path
	marks lineMarks
}

// NewSource opens the file.
func NewSource(cfg Config) (*Source, error) {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 256
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Decoder == nil {
		cfg.Decoder = cdc.NewDecoder(cdc.DecoderConfig{})
	}
	f, err := os.Open(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("open source.file.path: %w", err)
	}
	name := cfg.Path
	if abs, err := filepath.Abs(cfg.Path); err == nil {
		name = abs
	}
	return &Source{cfg: cfg, f: f, r: bufio.NewReaderSize(f, 1<<20), name: "file:" + name}, nil
}

// Close closes the file.
func (s *Source) Close() error { return s.f.Close() }

// Fetch returns the next lines. At the end of the file it returns io.EOF, or,
// when following, waits for more.
func (s *Source) Fetch(ctx context.Context) (cdc.Batch, error) {
	var msgs []cdc.Record
	for len(msgs) < s.cfg.BatchSize {
		if err := ctx.Err(); err != nil {
			return cdc.Batch{}, err
		}
		asked := time.Now()
		b, err := s.r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			if len(b) == 0 && len(s.tail) == 0 {
				// Every line written before asked was read.
				s.marks.atEnd(s.line, asked)
			}
			s.tail = append(s.tail, b...)
			if len(msgs) > 0 {
				break
			}
			if !s.cfg.Follow {
				if len(bytes.TrimSpace(s.tail)) > 0 {
					// A last line without a newline is still a line.
					s.line++
					msgs = append(msgs, ParseLine(s.tail, s.line))
					s.tail = nil
					break
				}
				return cdc.Batch{}, io.EOF
			}
			select {
			case <-ctx.Done():
				return cdc.Batch{}, ctx.Err()
			case <-time.After(s.cfg.PollInterval):
			}
			continue
		}
		if err != nil {
			return cdc.Batch{}, fmt.Errorf("read %s: %w", s.cfg.Path, err)
		}
		if len(s.tail) > 0 {
			b = append(s.tail, b...)
			s.tail = nil
		}
		s.line++
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		msgs = append(msgs, ParseLine(b, s.line))
	}
	var ts uint64
	for i := range msgs {
		msgs[i] = cdc.Decode(s.cfg.Decoder, msgs[i])
		if msgs[i].Change != nil {
			ts = max(ts, msgs[i].Change.Version.TS)
		}
	}
	upTo := s.line
	return cdc.Batch{Records: msgs, Ack: func(context.Context) error {
		s.marks.applied(upTo, ts)
		return nil
	}}, nil
}

// envelope covers the two wrapped line shapes.
type envelope struct {
	Topic     *string         `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    *int64          `json:"offset"`
	Key       json.RawMessage `json:"key"`
	Value     json.RawMessage `json:"value"`
	Payload   json.RawMessage `json:"payload"` // kcat -J: the value as a string
	Headers   json.RawMessage `json:"headers"`
	TS        int64           `json:"ts"`
	// Written by DeadLetters for bytes that are not UTF-8.
	KeyB64     []byte   `json:"key_base64"`
	PayloadB64 []byte   `json:"payload_base64"`
	HeadersB64 []string `json:"headers_base64"`
}

var wrapperKeys = map[string]bool{
	"topic": true, "partition": true, "offset": true, "key": true, "value": true,
	"payload": true, "headers": true, "ts": true, "tstype": true, "broker": true, "timestamp": true,
	"key_base64": true, "payload_base64": true, "headers_base64": true,
}

// ParseLine turns one line of a JSON Lines dump into a message. A line that
// is not a recognised wrapper is taken as a bare value, bytes unchanged, so a
// malformed line still reaches the decoder and is dead-lettered with its
// reason instead of being dropped.
//
// A line that is not valid UTF-8 is always a bare value: encoding/json would
// read its strings with U+FFFD in place of the bad bytes, and the decoder
// must see (and dead-letter) the bytes as they are.
func ParseLine(line []byte, lineNo int64) cdc.Record {
	line = bytes.TrimRight(line, "\r\n")
	m := cdc.Record{Raw: cdc.Raw{Offset: lineNo, Value: line}}
	if bareByFirstKey(line) {
		// A Debezium value ({"before":…}, {"schema":…}, json.Marshal's
		// {"after":…}) is told from a wrapper by its first key, without
		// parsing the line a first time for the decoder to parse it again.
		return m
	}
	return parseWrapped(line, lineNo)
}

// parseWrapped is ParseLine without its first-key shortcut: the line
// (without its line break) parsed whole.
func parseWrapped(line []byte, lineNo int64) cdc.Record {
	m := cdc.Record{Raw: cdc.Raw{Offset: lineNo, Value: line}}
	if !utf8.Valid(line) {
		return m
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil || len(probe) == 0 {
		return m
	}
	for k := range probe {
		if !wrapperKeys[k] {
			return m
		}
	}
	_, hasValue := probe["value"]
	payload, hasPayload := probe["payload"]
	kcat := hasPayload && (len(payload) > 0 && (payload[0] == '"' || string(payload) == "null"))
	if !hasValue && !kcat {
		return m // e.g. a JsonConverter {"schema":…,"payload":{…}} without schema key? not a wrapper
	}
	var env envelope
	if json.Unmarshal(line, &env) != nil {
		return m
	}
	w := cdc.Record{Raw: cdc.Raw{Offset: lineNo, Partition: env.Partition}}
	if env.Topic != nil {
		w.Topic = *env.Topic
	}
	if env.TS > 0 {
		w.Timestamp = time.UnixMilli(env.TS)
	}
	if kcat {
		w.Key = stringOrRaw(env.Key)
		w.Value = stringOrRaw(env.Payload)
	} else {
		w.Key = nullToNil(env.Key)
		w.Value = nullToNil(env.Value)
	}
	w.Headers = parseHeaders(env.Headers)
	if env.KeyB64 != nil {
		w.Key = env.KeyB64
	}
	if env.PayloadB64 != nil {
		w.Value = env.PayloadB64
	}
	if env.HeadersB64 != nil {
		w.Headers = nil
		for i := 0; i+1 < len(env.HeadersB64); i += 2 {
			v, err := base64.StdEncoding.DecodeString(env.HeadersB64[i+1])
			if err != nil {
				return m // not what DeadLetters wrote: let the decoder say so
			}
			w.Headers = append(w.Headers, cdc.Header{Key: env.HeadersB64[i], Value: v})
		}
	}
	return w
}

// bareByFirstKey reports a line that ParseLine takes as a bare value
// whatever follows: an object whose first key, spelled without escapes, is
// not a wrapper key. Valid JSON, such a line has a key no wrapper has;
// invalid, it is not a wrapper either. Anything else (an escaped first key,
// no key, not an object) is left to the full parse.
func bareByFirstKey(line []byte) bool {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return false
	}
	i = skipSpace(line, i+1)
	if i >= len(line) || line[i] != '"' {
		return false
	}
	end := bytes.IndexByte(line[i+1:], '"')
	if end < 0 {
		return false
	}
	key := line[i+1 : i+1+end]
	if bytes.IndexByte(key, '\\') >= 0 {
		return false
	}
	return !wrapperKeys[string(key)]
}

// skipSpace returns the index of the first byte of b at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func nullToNil(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return b
}

// stringOrRaw unwraps a JSON string (kcat's form); anything else is kept raw.
func stringOrRaw(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		return []byte(s)
	}
	return b
}

// parseHeaders accepts kcat's ["k","v",…] list, a {"k":"v"} object, or a
// [{"key":…,"value":…}] list.
func parseHeaders(b json.RawMessage) []cdc.Header {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	var flat []string
	if json.Unmarshal(b, &flat) == nil {
		var hs []cdc.Header
		for i := 0; i+1 < len(flat); i += 2 {
			hs = append(hs, cdc.Header{Key: flat[i], Value: []byte(flat[i+1])})
		}
		return hs
	}
	var obj map[string]string
	if json.Unmarshal(b, &obj) == nil {
		// Sorted: a JSON object has no order, and the same line must give
		// the same message every time (dead letters, replays, goldens).
		var hs []cdc.Header
		for _, k := range slices.Sorted(maps.Keys(obj)) {
			hs = append(hs, cdc.Header{Key: k, Value: []byte(obj[k])})
		}
		return hs
	}
	var list []struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	if json.Unmarshal(b, &list) == nil {
		var hs []cdc.Header
		for _, h := range list {
			hs = append(hs, cdc.Header{Key: h.Key, Value: []byte(h.Value)})
		}
		return hs
	}
	return nil
}
