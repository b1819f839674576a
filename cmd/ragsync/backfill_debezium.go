package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/sink"
)

// debeziumFlags are backfill's --via debezium options.
type debeziumFlags struct {
	via            string
	signalTable    string
	signalTopic    string
	connectorName  string
	stop           bool
	follow         bool
	followTimeout  time.Duration
	followInterval time.Duration
}

func (f *debeziumFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.via, "via", "", `"debezium": ask the connector for an incremental snapshot instead of reading the tables`)
	fl.StringVar(&f.signalTable, "signal-table", "", "with --via debezium: the connector's signal table (signal.data.collection), written through --source-url")
	fl.StringVar(&f.signalTopic, "signal-topic", "", "with --via debezium: the connector's Kafka signal topic (signal.kafka.topic), on source.kafka.brokers")
	fl.StringVar(&f.connectorName, "connector-name", "", "with --signal-topic: the connector's topic.prefix, the signal's key (default: the first source.kafka.topics entry up to its first dot)")
	fl.BoolVar(&f.stop, "stop", false, "with --via debezium: send stop-snapshot for the tables instead")
	fl.BoolVar(&f.follow, "follow", true, "with --via debezium: follow the snapshot events serve applies until every row is in")
	fl.DurationVar(&f.followTimeout, "follow-timeout", 0, "with --follow: give up after this long (0: until done or Ctrl-C)")
	fl.DurationVar(&f.followInterval, "follow-interval", 5*time.Second, "with --follow: how often to count")
	_ = fl.MarkHidden("follow-interval")
}

// viaDebezium sends the snapshot signal and follows its progress in the
// index: serve applies the connector's snapshot events like any other.
func viaDebezium(ctx context.Context, cmd *cobra.Command, cfg Config, bc backfill.Config, f debeziumFlags) error {
	if f.via != "debezium" {
		return fmt.Errorf("--via %q: the only other way is \"debezium\" (omit --via to read the tables directly)", f.via)
	}
	if (f.signalTable == "") == (f.signalTopic == "") {
		return errors.New("--via debezium: give exactly one of --signal-table (the connector's signal.data.collection) or --signal-topic (its signal.kafka.topic)")
	}
	var tables []string
	where := ""
	for _, t := range bc.Tables {
		tables = append(tables, t.Name)
		where = t.Where
	}
	sig := backfill.ExecuteSnapshot(tables, where)
	if f.stop {
		sig = backfill.StopSnapshot(tables)
	}
	out := cmd.OutOrStdout()

	var cat *sink.Catalog
	var since time.Time
	if f.follow && !f.stop {
		p, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
		if err != nil {
			return err
		}
		defer p.Close()
		cat = sink.NewCatalog(p, cfg.Postgres.Schema)
		// The index's clock, not ours: the sink stamps updated_at with it.
		if since, err = cat.Clock(ctx); err != nil {
			return err
		}
		// serve applies to the alias's target (see resolveIndex).
		if r, ok, err := cat.Resolve(ctx, cfg.Index); err == nil && ok {
			cfg.Index = r.Index.Name
		}
	}

	switch {
	case f.signalTable != "":
		if bc.URL == "" {
			return errors.New("--signal-table: the signal is inserted into the document database; pass --source-url or set backfill.source_url")
		}
		conn, err := pgx.Connect(ctx, bc.URL)
		if err != nil {
			return fmt.Errorf("connect source: %w (check --source-url)", err)
		}
		defer conn.Close(ctx)
		if err := sig.Insert(ctx, conn, f.signalTable); err != nil {
			return err
		}
		fmt.Fprintf(out, "sent %s %s for %s through table %s\n", sig.Type, sig.ID, strings.Join(tables, ", "), f.signalTable)
	default:
		key := f.connectorName
		if key == "" && len(cfg.Source.Kafka.Topics) > 0 {
			key, _, _ = strings.Cut(cfg.Source.Kafka.Topics[0], ".")
		}
		if key == "" {
			return errors.New("--signal-topic: pass --connector-name (the connector's topic.prefix), it is the signal's key")
		}
		if len(cfg.Source.Kafka.Brokers) == 0 {
			return errors.New("--signal-topic: source.kafka.brokers is empty; set it to the Kafka cluster the connector reads signals from")
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Source.Kafka.Brokers...))
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		defer cl.Close()
		rec := &kgo.Record{Topic: f.signalTopic, Key: []byte(key), Value: sig.KafkaValue()}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("send %s signal to topic %s: %w", sig.Type, f.signalTopic, err)
		}
		fmt.Fprintf(out, "sent %s %s for %s through topic %s (key %s)\n", sig.Type, sig.ID, strings.Join(tables, ", "), f.signalTopic, key)
	}
	if !f.follow || f.stop {
		return nil
	}
	return follow(ctx, cmd, cfg, bc, f, cat, tables, since)
}

// follow counts the documents serve applies per table until each table has
// as many as its rows (counted in the source when it is reachable).
func follow(ctx context.Context, cmd *cobra.Command, cfg Config, bc backfill.Config, f debeziumFlags, cat *sink.Catalog, tables []string, since time.Time) error {
	want := map[string]int64{}
	if bc.URL != "" {
		if src, err := backfill.Open(ctx, bc, nil); err == nil {
			for _, t := range tables {
				want[t] = src.Total(t)
			}
			src.Close()
		}
	}
	if f.followTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.followTimeout)
		defer cancel()
	}
	out := cmd.OutOrStdout()
	t := time.NewTicker(f.followInterval)
	defer t.Stop()
	var got map[string]int64
	for {
		var err error
		got, err = cat.AppliedSince(ctx, cfg.Index, tables, since)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil {
			var parts []string
			done := len(want) == len(tables)
			for _, tb := range tables {
				if w, ok := want[tb]; ok {
					parts = append(parts, fmt.Sprintf("%s %d/%d", tb, got[tb], w))
					done = done && got[tb] >= w
				} else {
					parts = append(parts, fmt.Sprintf("%s %d", tb, got[tb]))
				}
			}
			fmt.Fprintf(out, "snapshot applied: %s\n", strings.Join(parts, ", "))
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("snapshot not complete after %s (is serve running, and the connector's signal channel enabled? see docs/debezium.md)", f.followTimeout)
			}
			return nil
		case <-t.C:
		}
	}
}
