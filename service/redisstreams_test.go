package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/internal/redistest"
)

// TestRedisStreamsTransport: source.kind redis-streams opens the source of
// Debezium Server's Redis sink with what serve gives it (the decoder's
// tables, --once), with its lag for the monitor and the metrics; its dead
// letters go to "<stream>.ragsync-dlq", where the dlq command finds them.
func TestRedisStreamsTransport(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	stream := prefix + ":dbserver1.public.articles"
	// A create whose key is Debezium Server's null literal: only the
	// configured id column gives it a document key.
	value := `{"op":"c","source":{"connector":"postgresql","schema":"public","table":"articles","lsn":100,"ts_ms":1700000000000},"after":{"id":7,"title":"t"}}`
	require.NoError(t, rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{"default", value}}).Err())
	require.NoError(t, rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{`{"id":8}`, "not json"}}).Err())

	cfg := SourceConfig{Kind: "redis-streams", Version: "test",
		RedisStreams: redisstream.Config{URL: redistest.URL(), Streams: []string{stream}, Consumer: "svc"}}
	dec := cdc.DecoderConfig{Tables: []cdc.TableConfig{{Match: "public.articles", ID: []string{"id"}}}}
	src, err := newSource(t.Context(), cfg, dec, true, nil, nil, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer src.close()
	require.NotNil(t, src.lag, "the monitor reads its lag")
	require.NotNil(t, src.collector, "and the metrics")

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var got []cdc.Record
	var acks []func(context.Context) error
	for {
		b, err := src.src.Fetch(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, b.Records...)
		if b.Ack != nil {
			acks = append(acks, b.Ack)
		}
	}
	require.Len(t, got, 2, "--once stops at what was there")
	require.NotNil(t, got[0].Change)
	require.Equal(t, "7", got[0].Change.DocKey, "the decoder has the configured id columns")
	require.Error(t, got[1].Err)

	lag, err := src.lag.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), lag[stream][0], "handed out, not yet acknowledged")
	require.NoError(t, src.dlq.Put(ctx, got[1], got[1].Err))
	for _, ack := range acks {
		require.NoError(t, ack(ctx))
	}
	lag, err = src.lag.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), lag[stream][0])

	stores, closeStores, err := OpenDeadLetters(cfg, "list")
	require.NoError(t, err)
	defer closeStores()
	require.Len(t, stores, 1)
	require.Equal(t, stream+redisstream.DLQSuffix, stores[0].Name)
	dls, err := stores[0].List(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, []byte("not json"), dls[0].Value)
	require.Equal(t, stream, dls[0].OrigTopic)

	_, _, err = OpenDeadLetters(SourceConfig{Kind: "redis-streams"}, "list")
	require.ErrorContains(t, err, "source.redis_streams.url is empty")
}
