package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/service"
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
	fl.StringVar(&f.connectorName, "connector-name", "", "the Debezium connector's topic.prefix: with --signal-topic the signal's key; without --via, the source the rows' versions name, so they order against the connector's events (default with a Kafka source: the first source.kafka.topics entry up to its first dot)")
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
	out := cmd.OutOrStdout()
	return service.SignalSnapshot(ctx, service.SnapshotConfig{Index: cfg.indexConfig(), Source: bc,
		SignalTable: f.signalTable, SignalTopic: f.signalTopic, ConnectorName: f.connectorName,
		Brokers: cfg.Source.Kafka.Brokers, Topics: cfg.Source.Kafka.Topics, Stop: f.stop,
		Follow: f.follow, FollowTimeout: f.followTimeout, FollowInterval: f.followInterval,
		Say: func(line string) { fmt.Fprintln(out, line) }})
}
