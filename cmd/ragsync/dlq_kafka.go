package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc/kafka"
)

// kafkaDLQ works on the CDC dead-letter topic(s): dlq.topic, or
// "<topic>.ragsync-dlq" for each of source.kafka.topics.
func kafkaDLQ(cmd *cobra.Command, cfg Config, f *dlqFlags, action string) error {
	k := cfg.Source.Kafka
	if len(k.Brokers) == 0 {
		return errors.New("dlq: source.kafka.brokers is empty; the CDC dead letters live in Kafka (use --frontdoor for the query front door's)")
	}
	topics := []string{cfg.DLQ.Topic}
	if cfg.DLQ.Topic == "" {
		topics = topics[:0]
		for _, t := range k.Topics {
			topics = append(topics, t+kafka.DLQSuffix)
		}
	}
	if len(topics) == 0 {
		return errors.New("dlq: no dead-letter topic: set dlq.topic or source.kafka.topics")
	}
	// A plain client: the admin functions read without joining a group.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		return fmt.Errorf("dlq: connect to %v: %w", k.Brokers, err)
	}
	defer cl.Close()
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	for _, t := range topics {
		switch action {
		case "list":
			dls, err := kafka.DLQList(ctx, cl, t, f.n)
			if err != nil {
				return err
			}
			if len(dls) == 0 && !f.asJSON {
				fmt.Fprintf(out, "%s: no dead letters\n", t)
			}
			for _, d := range dls {
				if f.asJSON {
					b, err := json.Marshal(map[string]any{
						"topic": t, "partition": d.Partition, "offset": d.Offset, "timestamp": d.Timestamp,
						"original_topic": d.OrigTopic, "original_partition": d.OrigPartition, "original_offset": d.OrigOffset,
						"error_class": d.ErrorClass, "error": d.ErrorMessage, "key": string(d.Key), "value_bytes": len(d.Value),
					})
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
					continue
				}
				fmt.Fprintf(out, "%s/%d@%d  from %s/%d@%d  %s\n    %s\n", t, d.Partition, d.Offset,
					d.OrigTopic, d.OrigPartition, d.OrigOffset, d.ErrorClass, d.ErrorMessage)
			}
		case "replay":
			n, err := kafka.DLQReplay(ctx, cl, t, "")
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: replayed %d record(s) to their original topics\n", t, n)
		case "purge":
			n, err := kafka.DLQPurge(ctx, cl, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: purged %d record(s)\n", t, n)
		default:
			return errors.New("unknown dlq action " + action)
		}
	}
	return nil
}
