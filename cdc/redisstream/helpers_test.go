package redisstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/internal/redistest"
)

// bundle is one test's Redis: a client, and a stream name under the
// test's own key prefix (the group and the dead-letter stream live under
// it too, so the prefix's cleanup removes everything the test made).
type bundle struct {
	rdb    *redis.Client
	stream string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	return &bundle{rdb: rdb, stream: prefix + ":dbserver1.public.articles"}
}

// source opens a source on the bundle's stream with cfg's other settings,
// closed at cleanup.
func (b *bundle) source(t *testing.T, cfg redisstream.Config) *redisstream.Source {
	t.Helper()
	cfg.URL = redistest.URL()
	if cfg.Streams == nil {
		cfg.Streams = []string{b.stream}
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "c1"
	}
	if cfg.Block == 0 {
		cfg.Block = 50 * time.Millisecond
	}
	s, err := redisstream.NewSource(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// article is a Debezium PostgreSQL change of public.articles, payload only,
// as Debezium Server's JSON format writes it.
func article(id int, lsn int64, title string) (key, value string) {
	p := map[string]any{
		"op": "c", "ts_ms": 1700000000000 + lsn,
		"source": map[string]any{"connector": "postgresql", "name": "dbserver1", "db": "app", "schema": "public",
			"table": "articles", "lsn": lsn, "ts_ms": 1700000000000 + lsn},
		"before": nil,
		"after":  map[string]any{"id": id, "title": title, "body": "text of " + title},
	}
	v, _ := json.Marshal(p)
	return fmt.Sprintf(`{"id":%d}`, id), string(v)
}

// addCompact writes an entry the way Debezium Server's default (compact)
// format does: one field, the key, whose value is the record's value.
func (b *bundle) addCompact(t *testing.T, key, value string) string {
	t.Helper()
	id, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.stream, Values: []any{key, value}}).Result()
	require.NoError(t, err)
	return id
}

// addExtended writes an entry the way message.format=extended does: key,
// value, and the headers with upper-cased names.
func (b *bundle) addExtended(t *testing.T, key, value string, headers ...string) string {
	t.Helper()
	vals := []any{"key", key, "value", value}
	for _, h := range headers {
		vals = append(vals, h)
	}
	id, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.stream, Values: vals}).Result()
	require.NoError(t, err)
	return id
}

// addArticles writes n compact creates of documents 0..n-1 and returns
// their entry ids.
func (b *bundle) addArticles(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		k, v := article(i, int64(100+i), fmt.Sprintf("Doc %d", i))
		ids = append(ids, b.addCompact(t, k, v))
	}
	return ids
}

// fetch calls Fetch until it has handed over want records (failing after a
// generous deadline), and returns the batches.
func fetch(t *testing.T, s *redisstream.Source, want int) []cdc.Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []cdc.Batch
	got := 0
	for got < want {
		b, err := s.Fetch(ctx)
		require.NoError(t, err, "after %d of %d records", got, want)
		if len(b.Records) > 0 {
			out = append(out, b)
			got += len(b.Records)
		}
	}
	require.Equal(t, want, got, "no more than wanted")
	return out
}

// records flattens batches.
func records(bs []cdc.Batch) []cdc.Record {
	var out []cdc.Record
	for _, b := range bs {
		out = append(out, b.Records...)
	}
	return out
}

// ids are the entry ids of records, from their offsets.
func ids(rs []cdc.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, redisstream.EntryID(r.Offset))
	}
	return out
}

// pending is how many entries the group has delivered and not acknowledged.
func (b *bundle) pending(t *testing.T, group string) int64 {
	t.Helper()
	p, err := b.rdb.XPending(t.Context(), b.stream, group).Result()
	require.NoError(t, err)
	return p.Count
}

// ackAll acknowledges batches, in order.
func ackAll(t *testing.T, bs []cdc.Batch) {
	t.Helper()
	for _, b := range bs {
		require.NoError(t, b.Ack(t.Context()))
	}
}

// quiet calls Fetch n times and fails if any hands over a record.
func quiet(t *testing.T, s *redisstream.Source, n int) {
	t.Helper()
	for range n {
		b, err := s.Fetch(t.Context())
		require.NoError(t, err)
		require.Empty(t, ids(b.Records), "nothing is due")
	}
}
