package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/sink"
)

// SnapshotConfig is a backfill through Debezium: a signal that asks the
// connector for an incremental snapshot of the tables (or to stop one),
// and, with Follow, the count of the snapshot's rows a running serve has
// applied until every row is in.
type SnapshotConfig struct {
	// Index is the index serve applies the snapshot to.
	Index IndexConfig
	// Source names the tables (and the --where filter); its URL is the
	// document database, where SignalTable is and the rows are counted.
	Source backfill.Config
	// Exactly one of SignalTable (the connector's signal.data.collection)
	// and SignalTopic (its signal.kafka.topic, on Brokers) carries the
	// signal; a Kafka signal's key is ConnectorName, by default the first
	// of Topics up to its first dot.
	SignalTable, SignalTopic string
	ConnectorName            string
	Brokers, Topics          []string
	// Stop sends stop-snapshot instead.
	Stop bool
	// Follow counts the applied rows every FollowInterval, for at most
	// FollowTimeout (0: until done or ctx ends).
	Follow                        bool
	FollowTimeout, FollowInterval time.Duration
	// Say is told each line to show (the signal sent, the counts).
	Say func(string)
}

// SignalSnapshot sends the signal and, with Follow, follows the snapshot.
func SignalSnapshot(ctx context.Context, f SnapshotConfig) error {
	bc := f.Source
	if (f.SignalTable == "") == (f.SignalTopic == "") {
		return errors.New("--via debezium: give exactly one of --signal-table (the connector's signal.data.collection) or --signal-topic (its signal.kafka.topic)")
	}
	var tables []string
	where := ""
	for _, t := range bc.Tables {
		tables = append(tables, t.Name)
		where = t.Where
	}
	sig := backfill.ExecuteSnapshot(tables, where)
	if f.Stop {
		sig = backfill.StopSnapshot(tables)
	}

	var cat *sink.Catalog
	var since time.Time
	if f.Follow && !f.Stop {
		p, err := sink.OpenPool(ctx, f.Index.URL, f.Index.Schema)
		if err != nil {
			return err
		}
		defer p.Close()
		cat = sink.NewCatalog(p, f.Index.Schema)
		// The index's clock, not ours: the sink stamps updated_at with it.
		if since, err = cat.Clock(ctx); err != nil {
			return err
		}
		// serve applies to the alias's target (see resolveIndex).
		if r, ok, err := cat.Resolve(ctx, f.Index.Index); err == nil && ok {
			f.Index.Index = r.Index.Name
		}
	}

	switch {
	case f.SignalTable != "":
		if bc.URL == "" {
			return errors.New("--signal-table: the signal is inserted into the document database; pass --source-url or set backfill.source_url")
		}
		conn, err := pgx.Connect(ctx, bc.URL)
		if err != nil {
			return fmt.Errorf("connect source: %w (check --source-url)", err)
		}
		defer conn.Close(ctx)
		if err := sig.Insert(ctx, conn, f.SignalTable); err != nil {
			return err
		}
		f.Say(fmt.Sprintf("sent %s %s for %s through table %s", sig.Type, sig.ID, strings.Join(tables, ", "), f.SignalTable))
	default:
		key := f.ConnectorName
		if key == "" && len(f.Topics) > 0 {
			key, _, _ = strings.Cut(f.Topics[0], ".")
		}
		if key == "" {
			return errors.New("--signal-topic: pass --connector-name (the connector's topic.prefix), it is the signal's key")
		}
		if len(f.Brokers) == 0 {
			return errors.New("--signal-topic: source.kafka.brokers is empty; set it to the Kafka cluster the connector reads signals from")
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(f.Brokers...))
		if err != nil {
			return fmt.Errorf("kafka client: %w", err)
		}
		defer cl.Close()
		rec := &kgo.Record{Topic: f.SignalTopic, Key: []byte(key), Value: sig.KafkaValue()}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("send %s signal to topic %s: %w", sig.Type, f.SignalTopic, err)
		}
		f.Say(fmt.Sprintf("sent %s %s for %s through topic %s (key %s)", sig.Type, sig.ID, strings.Join(tables, ", "), f.SignalTopic, key))
	}
	if !f.Follow || f.Stop {
		return nil
	}
	return followSnapshot(ctx, f, cat, tables, since)
}

// follow counts the documents serve applies per table until each table has
// as many as its rows (counted in the source when it is reachable).
func followSnapshot(ctx context.Context, f SnapshotConfig, cat *sink.Catalog, tables []string, since time.Time) error {
	bc := f.Source
	want := map[string]int64{}
	if bc.URL != "" {
		if src, err := backfill.Open(ctx, bc, nil); err == nil {
			for _, t := range tables {
				want[t] = src.Total(t)
			}
			src.Close()
		}
	}
	if f.FollowTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.FollowTimeout)
		defer cancel()
	}
	t := time.NewTicker(f.FollowInterval)
	defer t.Stop()
	var got map[string]int64
	for {
		var err error
		got, err = cat.AppliedSince(ctx, f.Index.Index, tables, since)
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
			f.Say("snapshot applied: " + strings.Join(parts, ", "))
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("snapshot not complete after %s (is serve running, and the connector's signal channel enabled? see docs/debezium.md)", f.FollowTimeout)
			}
			return nil
		case <-t.C:
		}
	}
}
