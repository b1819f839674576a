package monitor_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/internal/redistest"
	"github.com/ragsync/ragsync/monitor"
)

// TestEventsRedactSecrets logs the provider's error quoting the API key and
// a warning quoting the Postgres URL with its password, as serve's logger
// would, then publishes the monitor's events to Kafka and Redis: the
// events carry both warnings, with neither secret in clear.
func TestEventsRedactSecrets(t *testing.T) {
	t.Parallel()
	const apiKey, pgPassword = "sk-proj-M0nitorKey", "M0nitorPgPassw0rd"
	b := setup(t)
	b.upsert(t, "a", 1, "alpha beta gamma", "delta epsilon zeta")
	b.srv.FailNext(1, openaitest.Fault{Status: 400, Message: "Incorrect API key provided: " + apiKey + "."})
	_, embedErr := b.emb.Embed(t.Context(), []string{"x"})
	require.ErrorContains(t, embedErr, apiKey)

	ring := monitor.NewLogRing(slog.NewTextHandler(t.Output(), nil), 10)
	logger := slog.New(ring)
	logger.Warn("embed failed; the document is dead-lettered", "error", embedErr)
	logger.Warn("connect postgres://owner:"+pgPassword+"@db.internal:5432/idx failed", "error", "connection refused")

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "ragsync.monitor"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	rdb, prefix := redistest.Client(t)
	stream := prefix + ":monitor"
	m, err := monitor.New(t.Context(), monitor.Config{SampleSize: 8, Logger: logger, Registerer: b.reg},
		monitor.Deps{Pool: b.pool, Schema: b.schema, Index: "docs", Embedder: b.emb, Logs: ring,
			Redact: redact.New(apiKey, pgPassword).String, ModelVersion: b.emb.ReportedModel,
			Publishers: []monitor.Publisher{monitor.KafkaPublisher{Client: kc, Topic: "ragsync.monitor"},
				monitor.RedisPublisher{Client: rdb, Stream: stream, MaxLen: 100}}})
	require.NoError(t, err)
	ctx := ctxT(t)
	st, err := m.Check(ctx, monitor.CheckOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, st.Events)

	var published []string
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("ragsync.monitor"))
	require.NoError(t, err)
	t.Cleanup(cons.Close)
	for len(published) < len(st.Events) {
		fs := cons.PollFetches(ctx)
		require.NoError(t, fs.Err())
		fs.EachRecord(func(r *kgo.Record) { published = append(published, "kafka: "+string(r.Value)) })
	}
	msgs, err := rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, len(st.Events))
	for _, x := range msgs {
		published = append(published, "redis: "+x.Values["event"].(string))
	}
	for _, e := range published {
		require.Contains(t, e, "Incorrect API key provided: "+redact.Mask, "the event carries the warning")
		require.Contains(t, e, "owner:"+redact.Mask+"@db.internal")
		require.NotContains(t, e, apiKey)
		require.NotContains(t, e, pgPassword)
	}
}
