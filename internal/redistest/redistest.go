// Package redistest gives tests a real Redis client and a key prefix of their
// own, so parallel tests (and other engineers' runs) never see each other's
// keys. It never runs FLUSHDB: cleanup deletes only the test's prefix.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is used when TEST_REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns TEST_REDIS_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client returns a client connected to URL() and a fresh key prefix
// ("test:<random>") for the test. It skips under -short and fails loudly when
// Redis is unreachable. Cleanup deletes every key under the prefix (SCAN +
// UNLINK) and closes the client.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis; skipped under -short")
	}
	opts, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("redistest: parse TEST_REDIS_URL %q: %v", URL(), err)
	}
	opts.PoolSize = 64
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("redistest: Redis at %s is unreachable (%v); run `make services` or set TEST_REDIS_URL", URL(), err)
	}
	prefix := "test:" + randomHex(8)
	t.Cleanup(func() {
		DeletePrefix(t, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// DeletePrefix removes every key starting with prefix+":" and the key prefix
// itself, using SCAN so a large keyspace is never blocked.
func DeletePrefix(t testing.TB, rdb *redis.Client, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+":*", 1000).Result()
		if err != nil {
			t.Errorf("redistest: scan %s:*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				t.Errorf("redistest: unlink %d keys: %v", len(keys), err)
				return
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	_ = rdb.Unlink(ctx, prefix).Err()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
