package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
)

var _ pipeline.TraceRecorder = (*monitor.Monitor)(nil)

// validateMonitor checks the monitor: section when the monitor is on.
func (c Config) validateMonitor() error {
	if !c.Monitor.On() {
		return nil
	}
	return c.Monitor.WithDefaults().Validate()
}

// monitorBrokers are where events go on Kafka: monitor.brokers, else the
// Kafka source's brokers; none means no Kafka events.
func (c Config) monitorBrokers() []string {
	if len(c.Monitor.Brokers) > 0 {
		return c.Monitor.Brokers
	}
	if c.Source.Kind == "kafka" {
		return c.Source.Kafka.Brokers
	}
	return nil
}

// monitorRedis is the Redis the events stream goes to: the front door's,
// when the front door is on or frontdoor.redis_url is set.
func (c Config) monitorRedis() (url, stream string, ok bool) {
	if !c.FrontDoor.Enabled && c.FrontDoor.RedisURL == "" {
		return "", "", false
	}
	f := c.frontDoorConfig()
	return f.RedisURL, f.Prefix + ":monitor", true
}

// monitorWiring is a monitor and the clients it publishes through.
type monitorWiring struct {
	m      *monitor.Monitor
	closes []func()
}

func (w *monitorWiring) Close() {
	for i := len(w.closes) - 1; i >= 0; i-- {
		w.closes[i]()
	}
}

// kafkaLag adapts the Kafka source to monitor.LagSource.
type kafkaLag struct {
	src    *cdc.KafkaSource
	topics []string
}

func (k kafkaLag) Lag(ctx context.Context) (map[string]map[int32]int64, error) { return k.src.Lag(ctx) }

func (k kafkaLag) Partitions(ctx context.Context) (int, error) {
	td, err := kadm.NewClient(k.src.Client()).ListTopics(ctx, k.topics...)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range td {
		if t.Err != nil {
			// An unknown topic would otherwise count as 0 partitions and
			// bound the recommended replicas to 1.
			return 0, fmt.Errorf("describe topic %s: %w", t.Topic, t.Err)
		}
		n += len(t.Partitions)
	}
	return n, nil
}

// newMonitor builds the monitor of ix. publish adds the Kafka, Redis and
// log publishers (serve; `ragsync monitor` only reads). src may be nil.
func newMonitor(ctx context.Context, cfg Config, ix *index, src any, reg *prometheus.Registry, logs *monitor.LogRing, logger *slog.Logger, publish bool) (*monitorWiring, error) {
	w := &monitorWiring{}
	mc := cfg.Monitor
	mc.Logger = logger
	if reg != nil {
		mc.Registerer = reg
	}
	deps := monitor.Deps{Pool: ix.pool, Schema: cfg.Postgres.Schema, Index: ix.name, Embedder: ix.emb, Logs: logs,
		Debt: ix.st, DebtWindow: cfg.Reuse.RepayWindow}
	if reg != nil {
		deps.Gatherer = reg
	}
	deps.ModelVersion = ix.emb.ReportedModel
	if ks, ok := src.(*cdc.KafkaSource); ok {
		deps.Lag = kafkaLag{src: ks, topics: cfg.Source.Kafka.Topics}
	}
	if publish {
		// serve's monitor: the one that takes missing canary baselines.
		deps.BaselineBy = "serve"
		mcd := mc.WithDefaults()
		deps.Publishers = append(deps.Publishers, monitor.LogPublisher{Logger: logger.With("stage", "monitor")})
		if brokers := cfg.monitorBrokers(); len(brokers) > 0 {
			kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
			if err != nil {
				return nil, fmt.Errorf("monitor.brokers: %w", err)
			}
			w.closes = append(w.closes, kc.Close)
			deps.Publishers = append(deps.Publishers, monitor.KafkaPublisher{Client: kc, Topic: mcd.Topic})
		}
		if url, stream, ok := cfg.monitorRedis(); ok {
			rdb, err := fallback.OpenRedis(ctx, url)
			if err != nil {
				w.Close()
				return nil, err
			}
			w.closes = append(w.closes, func() { _ = rdb.Close() })
			deps.Publishers = append(deps.Publishers, monitor.RedisPublisher{Client: redis.UniversalClient(rdb), Stream: stream, MaxLen: int64(mcd.StreamMaxLen)})
		}
	}
	m, err := monitor.New(ctx, mc, deps)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.m = m
	return w, nil
}

// startMonitor builds serve's monitor, or returns an empty wiring when
// monitor.enabled is false or off is true (serve --once without
// --monitor).
func startMonitor(ctx context.Context, cfg Config, ix *index, src any, reg *prometheus.Registry, logs *monitor.LogRing, logger *slog.Logger, off bool) (*monitorWiring, error) {
	if off || !cfg.Monitor.On() {
		return &monitorWiring{}, nil
	}
	return newMonitor(ctx, cfg, ix, src, reg, logs, logger, true)
}

// tap gives the front door an embedder whose query vectors feed query
// drift; without a monitor it is emb itself.
func (w *monitorWiring) tap(emb embedder.Client) embedder.Client {
	if w.m == nil {
		return emb
	}
	return tappedClient{Client: emb, tap: w.m.QueryTap(emb)}
}

// tappedClient routes a client's embeddings through the monitor's query
// tap; the counted form goes through it too (a query is short, so its
// count is not worth keeping).
type tappedClient struct {
	embedder.Client
	tap monitor.Embedder
}

func (t tappedClient) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return t.tap.Embed(ctx, texts)
}

func (t tappedClient) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return t.tap.Embed(ctx, texts)
}

// traces is the monitor as the pipeline's trace recorder (the worst
// recent traces in its events); nil without a monitor, so the pipeline
// skips the recording altogether.
func (w *monitorWiring) traces() pipeline.TraceRecorder {
	if w.m == nil {
		return nil
	}
	return w.m
}

// run is the monitor's loop for serve's errgroup; nil at once without one.
func (w *monitorWiring) run(ctx context.Context) error {
	if w.m == nil {
		return nil
	}
	return w.m.Run(ctx)
}

// monitorSummary is the line serve --once --monitor adds to its summary:
// what the monitor did during the drain, from serve's registry.
func monitorSummary(g prometheus.Gatherer) string {
	var checks, failed, events, tokens float64
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "ragsync_monitor_checks_total":
				checks += v
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "failed" {
						failed += v
					}
				}
			case "ragsync_monitor_events_total":
				events += v
			case "ragsync_monitor_tokens_total":
				tokens += v
			}
		}
	}
	return fmt.Sprintf("monitor checks=%.0f checks_failed=%.0f events=%.0f tokens=%.0f", checks, failed, events, tokens)
}
