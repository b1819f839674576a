package cdc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers use Kafka Connect's names (errors.deadletterqueue.
// context.headers.enable), so tooling that reads Connect's dead letters reads
// ragsync's too.
const (
	HeaderErrTopic     = "__connect.errors.topic"
	HeaderErrPartition = "__connect.errors.partition"
	HeaderErrOffset    = "__connect.errors.offset"
	HeaderErrClass     = "__connect.errors.exception.class.name"
	HeaderErrMessage   = "__connect.errors.exception.message"
	HeaderErrStage     = "__connect.errors.stage"
	HeaderErrTimestamp = "__connect.errors.timestamp"
	HeaderVersion      = "ragsync.version"
)

// DLQSuffix is appended to a topic's name to form its dead-letter topic.
const DLQSuffix = ".ragsync-dlq"

// ErrorClass names the kind of a failure for the dead-letter headers.
func ErrorClass(err error) string {
	var de *DecodeError
	switch {
	case errors.As(err, &de):
		return "ragsync.cdc.DecodeError"
	default:
		return "ragsync.pipeline.ApplyError"
	}
}

// deadLetterHeaders returns the original headers followed by the reason.
// __connect.errors.timestamp is the message's timestamp, or, for a message
// that has none (a bare line of a file), the time it was dead-lettered:
// the zero time would read as year 1.
func deadLetterHeaders(m Message, cause error, version string) []Header {
	ts := m.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	hs := append([]Header(nil), m.Headers...)
	stage := "VALUE_CONVERTER"
	var de *DecodeError
	if !errors.As(cause, &de) {
		stage = "TASK_PUT"
	}
	return append(hs,
		Header{HeaderErrTopic, []byte(m.Topic)},
		Header{HeaderErrPartition, []byte(strconv.Itoa(int(m.Partition)))},
		Header{HeaderErrOffset, []byte(strconv.FormatInt(m.Offset, 10))},
		Header{HeaderErrClass, []byte(ErrorClass(cause))},
		Header{HeaderErrMessage, []byte(cause.Error())},
		Header{HeaderErrStage, []byte(stage)},
		Header{HeaderErrTimestamp, []byte(strconv.FormatInt(ts.UnixMilli(), 10))},
		Header{HeaderVersion, []byte(version)},
	)
}

// KafkaDeadLetters produces dead letters to "<topic>.ragsync-dlq" (or one
// fixed topic) with the original key, value and headers.
type KafkaDeadLetters struct {
	cl      *kgo.Client
	topic   string
	version string
	mu      sync.Mutex
	ensured map[string]bool
}

// NewKafkaDeadLetters produces with cl. An empty topic means "<source topic>" + DLQSuffix.
func NewKafkaDeadLetters(cl *kgo.Client, topic, version string) *KafkaDeadLetters {
	return &KafkaDeadLetters{cl: cl, topic: topic, version: version, ensured: map[string]bool{}}
}

// ensureTopic creates the dead-letter topic on first use: clusters often
// disable auto-creation, and a produce to a missing topic would wait
// forever instead of failing.
func (d *KafkaDeadLetters) ensureTopic(ctx context.Context, topic string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ensured[topic] {
		return nil
	}
	resp, err := kadm.NewClient(d.cl).CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create dead-letter topic %s: %w (create it yourself or set dlq.topic)", topic, err)
	}
	d.ensured[topic] = true
	return nil
}

// Put writes one dead letter and waits for the broker to acknowledge it.
func (d *KafkaDeadLetters) Put(ctx context.Context, m Message, cause error) error {
	topic := d.topic
	if topic == "" {
		topic = m.Topic + DLQSuffix
	}
	// Bounded, so a broker that will not take the record surfaces as a
	// retried error in the logs instead of a silent hang.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.ensureTopic(ctx, topic); err != nil {
		return err
	}
	r := &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value}
	for _, h := range deadLetterHeaders(m, cause, d.version) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if err := d.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("produce dead letter to %s: %w", topic, err)
	}
	return nil
}

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

// FileDeadLetters appends dead letters to a JSON Lines file in kcat's -J
// shape, which the file source reads back: fix the config, then replay the
// file with `serve --once`.
type FileDeadLetters struct {
	mu      sync.Mutex
	path    string
	version string
}

// NewFileDeadLetters appends to path, creating it on first use.
func NewFileDeadLetters(path, version string) *FileDeadLetters {
	return &FileDeadLetters{path: path, version: version}
}

// Path is where dead letters go.
func (d *FileDeadLetters) Path() string { return d.path }

// Put appends one dead letter and syncs the file. Key, value and header
// values that are not valid UTF-8 cannot sit in a JSON string without being
// changed (encoding/json writes U+FFFD), so they are written base64-encoded
// as key_base64, payload_base64 and headers_base64 instead, which the file
// source reads back byte for byte.
func (d *FileDeadLetters) Put(_ context.Context, m Message, cause error) error {
	b, err := fileLine(m, deadLetterHeaders(m, cause, d.version))
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
func fileLine(m Message, hs []Header) ([]byte, error) {
	textual := !slices.ContainsFunc(hs, func(h Header) bool { return !utf8.Valid(h.Value) })
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
