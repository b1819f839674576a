package redisstream

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// Start values: where a consumer group created by the Source begins.
const (
	// StartEarliest reads every entry the stream holds (XGROUP CREATE … 0).
	StartEarliest = "earliest"
	// StartLatest reads only entries added after the group was created
	// (XGROUP CREATE … $).
	StartLatest = "latest"
)

// DefaultNull is what Debezium Server writes for a null key or value
// (debezium.sink.redis.null.key and null.value both default to it).
const DefaultNull = "default"

// Config configures the Redis Streams source.
type Config struct {
	// URL is the Redis server Debezium Server writes to,
	// redis://[user:password@]host:port/db (rediss:// for TLS).
	URL string
	// Streams are the streams to read, one per table: Debezium Server
	// names each after the record's destination (the topic name,
	// e.g. dbserver1.public.articles) unless a stream name mapper renames
	// them.
	Streams []string
	// Group is the consumer group, created on each stream when absent.
	// Defaults to "ragsync".
	Group string
	// Consumer names this member of the group. A consumer re-reads its own
	// unacknowledged entries when it starts, so a stable name (a
	// StatefulSet's pod name) recovers a crash at once; another member
	// takes over a dead consumer's entries after ClaimIdle, and a start
	// deletes the consumers that left nothing pending and were idle that
	// long. Defaults to "<hostname>-<pid>".
	Consumer string
	// MaxPollRecords is the most entries read from one stream at once
	// (XREADGROUP COUNT) and so handed over in one batch. Defaults to 500.
	MaxPollRecords int
	// Block is how long one read waits for new entries (XREADGROUP BLOCK);
	// a stop waits for it at most. Defaults to 1s.
	Block time.Duration
	// ClaimIdle is how long an entry delivered to another consumer may stay
	// unacknowledged before this one takes it over (XAUTOCLAIM): a consumer
	// that died (SIGKILL, a lost pod) leaves its entries pending. Keep it
	// above the longest time one batch takes to apply, or a slow live
	// consumer's entries are applied twice (harmless, but wasted work).
	// Defaults to 30s.
	ClaimIdle time.Duration
	// Start is where a group this source creates begins: StartEarliest
	// (every entry the stream holds) or StartLatest (only new ones). An
	// existing group keeps its position. Defaults to StartEarliest.
	Start string
	// NullKey and NullValue are what Debezium Server writes for a null key
	// and a null value (a tombstone): debezium.sink.redis.null.key and
	// null.value. Both default to DefaultNull.
	NullKey, NullValue string
	// Decoder decodes each entry's Debezium value as it is handed over
	// (Record.Change, or Record.Err with the reason): the pipeline decodes
	// nothing. Nil is a decoder with the default settings.
	Decoder *cdc.Decoder
	// Logger receives the warnings (a stream that does not exist yet, a
	// failed read, an entry deleted before it was applied). Nil discards.
	Logger *slog.Logger
	// StopAtEnd makes Fetch return io.EOF once every entry the streams held
	// at start was handed out (serve --once), including those pending on
	// consumers idle for ClaimIdle. Meant for a single member.
	StopAtEnd bool
}

// withDefaults fills the unset settings.
func (c Config) withDefaults() Config {
	if c.Group == "" {
		c.Group = "ragsync"
	}
	if c.Consumer == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "ragsync"
		}
		c.Consumer = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.MaxPollRecords <= 0 {
		c.MaxPollRecords = 500
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = 30 * time.Second
	}
	if c.Start == "" {
		c.Start = StartEarliest
	}
	if c.NullKey == "" {
		c.NullKey = DefaultNull
	}
	if c.NullValue == "" {
		c.NullValue = DefaultNull
	}
	if c.Decoder == nil {
		c.Decoder = cdc.NewDecoder(cdc.DecoderConfig{})
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every setting that cannot work, each with its path in
// ragsync.yaml and the fix; unset settings take their defaults. NewSource
// calls it, and so does the configuration's check at start-up.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("source.redis_streams.url: set the Redis server Debezium Server writes to, e.g. redis://127.0.0.1:6379/0"))
	}
	if len(c.Streams) == 0 {
		errs = append(errs, errors.New("source.redis_streams.streams: list the streams Debezium Server writes, e.g. [dbserver1.public.articles]"))
	}
	seen := map[string]bool{}
	for i, s := range c.Streams {
		switch {
		case strings.TrimSpace(s) == "":
			errs = append(errs, fmt.Errorf("source.redis_streams.streams[%d]: empty; name a stream", i))
		case strings.HasSuffix(s, DLQSuffix):
			errs = append(errs, fmt.Errorf("source.redis_streams.streams[%d]: %q is a dead-letter stream; name the stream it belongs to, and use ragsync dlq replay for its entries", i, s))
		case seen[s]:
			errs = append(errs, fmt.Errorf("source.redis_streams.streams[%d]: %q is listed twice", i, s))
		}
		seen[s] = true
	}
	if c.Start != "" && c.Start != StartEarliest && c.Start != StartLatest {
		errs = append(errs, fmt.Errorf("source.redis_streams.start: %q is not %s or %s", c.Start, StartEarliest, StartLatest))
	}
	if c.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("source.redis_streams.max_poll_records: %d; set a positive count, or 0 for the default 500", c.MaxPollRecords))
	}
	if c.Block < 0 || c.ClaimIdle < 0 {
		errs = append(errs, errors.New("source.redis_streams.block and claim_idle: must not be negative; 0 takes the defaults (1s, 30s)"))
	}
	return errors.Join(errs...)
}
