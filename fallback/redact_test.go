package fallback

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/sink"
)

// pgDownSearcher fails every search with an error quoting the index's
// connection string, password included, as a careless driver error would.
type pgDownSearcher struct{ url string }

func (s pgDownSearcher) Search(context.Context, []float32, sink.Query) ([]sink.Hit, error) {
	return nil, fmt.Errorf("connect %s: connection refused", s.url)
}

func (s pgDownSearcher) SearchText(context.Context, string, sink.Query) ([]sink.Hit, error) {
	return nil, fmt.Errorf("connect %s: connection refused", s.url)
}

// TestRepliesAndDeadLettersRedactSecrets sends a request whose embedding
// fails with the provider's error body quoting the API key, and whose
// full-text fallback fails with an error quoting the Postgres URL and its
// password: neither secret reaches the reply or the dead-letter stream.
func TestRepliesAndDeadLettersRedactSecrets(t *testing.T) {
	const apiKey, pgPassword = "sk-test-FrontDoorK3y", "PgFr0ntS3cret"
	srv := openaitest.New(t, openaitest.Options{Dimensions: testDims, APIKey: apiKey})
	srv.SetHook(func(openaitest.Request) *openaitest.Fault {
		return &openaitest.Fault{Status: 400, Message: "Incorrect API key provided: " + apiKey + "."}
	})
	emb, err := embedder.NewOpenAI(embedder.Config{BaseURL: srv.URL, APIKey: apiKey, Model: "m", Dimensions: testDims, MaxRetries: 0})
	require.NoError(t, err)
	t.Cleanup(emb.Close)
	red := redact.New(apiKey, pgPassword)

	b := setup(t, func(c *Config) { c.MaxDeliveries = 1; c.BreakerFailures = 1000; c.Redact = red.String })
	fd, err := NewFrontDoor(b.cfg, b.rdb, emb, pgDownSearcher{url: "postgres://postgres:" + pgPassword + "@db.internal:5432/idx"}, prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	run(t, fd)

	res, err := b.search(t, Query{Text: "where is my key", K: 3})
	var rerr *ReplyError
	require.True(t, err == nil || errors.As(err, &rerr), "answered: %v", err)
	reason := res.Reason
	if rerr != nil {
		reason = rerr.Reason
	}
	require.Contains(t, reason, "Incorrect API key provided", "the reason says what failed")
	require.Contains(t, reason, redact.Mask)
	require.NotContains(t, reason, apiKey)
	require.NotContains(t, reason, pgPassword)

	dls, err := b.rdb.XRange(t.Context(), fd.keys.dlq(), "-", "+").Result()
	require.NoError(t, err)
	require.NotEmpty(t, dls)
	for _, m := range dls {
		for k, v := range m.Values {
			require.NotContains(t, fmt.Sprint(v), apiKey, "dead letter field %s", k)
			require.NotContains(t, fmt.Sprint(v), pgPassword, "dead letter field %s", k)
		}
	}
	list, err := fd.DLQList(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Contains(t, list[0].Reason, redact.Mask)
}
