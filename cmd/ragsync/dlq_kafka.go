package main

import (
	"errors"
	"fmt"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
)

// kafkaDLQ returns the CDC dead-letter topic(s), dlq.topic or
// "<topic>.ragsync-dlq" for each of source.kafka.topics, and closes their
// client when done. Replay sends each record back to its original topic.
func kafkaDLQ(cfg Config) ([]dlqStore, func(), error) {
	k := cfg.Source.Kafka
	if len(k.Brokers) == 0 {
		return nil, nil, errors.New("dlq: source.kafka.brokers is empty; the CDC dead letters live in Kafka (use --frontdoor for the query front door's)")
	}
	topics := []string{cfg.DLQ.Topic}
	if cfg.DLQ.Topic == "" {
		topics = topics[:0]
		for _, t := range k.Topics {
			topics = append(topics, t+kafka.DLQSuffix)
		}
	}
	if len(topics) == 0 {
		return nil, nil, errors.New("dlq: no dead-letter topic: set dlq.topic or source.kafka.topics")
	}
	// A plain client: the stores read without joining a group.
	cl, err := kafka.Dial(k.Brokers)
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: connect to %v: %w", k.Brokers, err)
	}
	stores := make([]dlqStore, 0, len(topics))
	for _, t := range topics {
		stores = append(stores, dlqStore{
			DeadLetterStore: kafka.NewDeadLetterTopic(cl, t, ""),
			name:            t,
			text: func(d cdc.DeadLetter) string {
				return fmt.Sprintf("%s/%d@%d  from %s/%d@%d  %s\n    %s", t, d.Partition, d.Offset,
					d.OrigTopic, d.OrigPartition, d.OrigOffset, d.ErrorClass, d.ErrorMessage)
			},
			where: func(d cdc.DeadLetter) map[string]any {
				return map[string]any{"topic": t, "partition": d.Partition, "offset": d.Offset}
			},
			replayed: func(n int) string { return fmt.Sprintf("%s: replayed %d record(s) to their original topics", t, n) },
		})
	}
	return stores, cl.Close, nil
}
