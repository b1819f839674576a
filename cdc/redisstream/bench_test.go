package redisstream_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/internal/redistest"
)

// BenchmarkFetchAndAck reads, decodes and acknowledges b.N Debezium
// Server entries (compact format, ~400-byte PostgreSQL creates) in
// batches of 500: the source's own cost per change, Redis round trips
// included, without the pipeline.
func BenchmarkFetchAndAck(b *testing.B) {
	rdb, prefix := redistest.Client(b)
	stream := prefix + ":dbserver1.public.articles"
	ctx := context.Background()
	for i := 0; i < b.N; {
		pipe := rdb.Pipeline()
		for j := 0; j < 1000 && i < b.N; j, i = j+1, i+1 {
			k, v := article(i, int64(100+i), fmt.Sprintf("Doc %d", i))
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{k, v}})
		}
		_, err := pipe.Exec(ctx)
		require.NoError(b, err)
	}
	s, err := redisstream.NewSource(ctx, redisstream.Config{URL: redistest.URL(), Streams: []string{stream}, Consumer: "bench"})
	require.NoError(b, err)
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for got := 0; got < b.N; {
		bt, err := s.Fetch(ctx)
		require.NoError(b, err)
		for _, r := range bt.Records {
			if r.Change == nil {
				b.Fatalf("entry not decoded: %v", r.Err)
			}
		}
		got += len(bt.Records)
		if bt.Ack != nil {
			require.NoError(b, bt.Ack(ctx))
		}
	}
}
