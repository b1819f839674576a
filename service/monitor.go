package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
)

var _ pipeline.TraceRecorder = (*monitor.Monitor)(nil)

// MonitorConfig is the monitor and where its events go.
type MonitorConfig struct {
	// Enabled is monitor.enabled.
	Enabled bool
	Config  monitor.Config
	// Brokers are where events go on Kafka (monitor.brokers, else the
	// Kafka source's); none means no Kafka events.
	Brokers []string
	// RedisURL and Stream are the Redis events stream; an empty RedisURL
	// means none.
	RedisURL, Stream string
	// DebtWindow is reuse.repay_window, against which the reuse debt's
	// age is judged.
	DebtWindow time.Duration
	// FreshnessTarget is freshness.target (0: no freshness signal), and
	// Backlog the pipeline's backlog its events carry (nil: none).
	FreshnessTarget time.Duration
	Backlog         func() monitor.Backlog
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

// OpenMonitor builds a monitor of ix that publishes nothing and takes no
// canary baseline: the monitor commands read and report, serve publishes
// and takes the baselines. close releases it.
func OpenMonitor(ctx context.Context, cfg MonitorConfig, ix *Index, logger *slog.Logger) (*monitor.Monitor, func(), error) {
	w, err := newMonitor(ctx, cfg, ix, nil, nil, nil, nil, logger, false)
	if err != nil {
		return nil, nil, err
	}
	return w.m, w.Close, nil
}

// newMonitor builds the monitor of ix. publish adds the Kafka, Redis and
// log publishers (serve; the monitor commands only read). lag may be nil.
// red masks secrets in the events' text (nil: the password patterns).
func newMonitor(ctx context.Context, cfg MonitorConfig, ix *Index, lag monitor.LagSource, reg *prometheus.Registry, logs *monitor.LogRing, red *redact.Redactor, logger *slog.Logger, publish bool) (*monitorWiring, error) {
	w := &monitorWiring{}
	mc := cfg.Config
	mc.Logger = logger
	if reg != nil {
		mc.Registerer = reg
	}
	deps := monitor.Deps{Pool: ix.Pool, Schema: ix.Schema, Index: ix.Name, Embedder: ix.Emb, Logs: logs,
		Debt: ix.Store, DebtWindow: cfg.DebtWindow, ModelVersion: ix.Emb.ReportedModel, Lag: lag, Redact: red.String,
		FreshnessTarget: cfg.FreshnessTarget, Backlog: cfg.Backlog, VectorType: ix.Store.Identity().Type}
	if reg != nil {
		deps.Gatherer = reg
	}
	if ix.budget != nil && publish {
		// serve's monitor: its embedder is the one doing the work. A
		// monitor command's own client sends next to nothing, so its
		// budget would say nothing of the fleet.
		deps.Budget = ix.budget
	}
	if publish {
		// serve's monitor: the one that takes missing canary baselines.
		deps.BaselineBy = "serve"
		mcd := mc.WithDefaults()
		deps.Publishers = append(deps.Publishers, monitor.LogPublisher{Logger: logger.With("stage", "monitor")})
		if len(cfg.Brokers) > 0 {
			kc, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.AllowAutoTopicCreation())
			if err != nil {
				return nil, fmt.Errorf("monitor.brokers: %w", err)
			}
			w.closes = append(w.closes, kc.Close)
			deps.Publishers = append(deps.Publishers, monitor.KafkaPublisher{Client: kc, Topic: mcd.Topic})
		}
		if cfg.RedisURL != "" {
			rdb, err := fallback.OpenRedis(ctx, cfg.RedisURL)
			if err != nil {
				w.Close()
				return nil, err
			}
			w.closes = append(w.closes, func() { _ = rdb.Close() })
			deps.Publishers = append(deps.Publishers, monitor.RedisPublisher{Client: redis.UniversalClient(rdb), Stream: cfg.Stream, MaxLen: int64(mcd.StreamMaxLen)})
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

// providerBudget is the embedder's budget as the monitor reads it: the
// live lane, every lane summed, and the key's limits from ec.
func providerBudget(b embedder.BudgetStatus, ec embedder.Config) monitor.ProviderBudget {
	p := monitor.ProviderBudget{Mode: b.Mode, Members: b.Members,
		RequestsPerMinute: ec.RequestsPerMinute, TokensPerMinute: ec.TokensPerMinute}
	for lane, s := range b.Lanes {
		l := monitor.BudgetLane{Requests: s.Requests, Tokens: s.Tokens, Wait: s.Wait, Throttled: s.Throttled}
		if lane == embedder.LaneLive {
			p.Live = l
		}
		p.All.Requests += l.Requests
		p.All.Tokens += l.Tokens
		p.All.Wait += l.Wait
		p.All.Throttled += l.Throttled
	}
	return p
}
