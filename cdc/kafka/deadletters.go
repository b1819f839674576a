package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
)

// DLQSuffix is appended to a topic's name to form its dead-letter topic.
const DLQSuffix = ".ragsync-dlq"

// DeadLetters produces dead letters to "<topic>.ragsync-dlq" (or one
// fixed topic) with the original key, value and headers.
type DeadLetters struct {
	cl      *kgo.Client
	topic   string
	version string
	mu      sync.Mutex
	ensured map[string]bool
}

// NewDeadLetters produces with cl. An empty topic means "<source topic>" + DLQSuffix.
func NewDeadLetters(cl *kgo.Client, topic, version string) *DeadLetters {
	return &DeadLetters{cl: cl, topic: topic, version: version, ensured: map[string]bool{}}
}

// ensureTopic creates the dead-letter topic on first use: clusters often
// disable auto-creation, and a produce to a missing topic would wait
// forever instead of failing.
func (d *DeadLetters) ensureTopic(ctx context.Context, topic string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ensured[topic] {
		return nil
	}
	resp, err := kadm.NewClient(d.cl).CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create dead-letter topic %s: %w (create it yourself or set dlq.topic)", topic, err)
	}
	d.ensured[topic] = true
	return nil
}

// Put writes one dead letter and waits for the broker to acknowledge it.
func (d *DeadLetters) Put(ctx context.Context, m cdc.Record, cause error) error {
	topic := d.topic
	if topic == "" {
		topic = m.Topic + DLQSuffix
	}
	// Bounded, so a broker that will not take the record surfaces as a
	// retried error in the logs instead of a silent hang.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.ensureTopic(ctx, topic); err != nil {
		return err
	}
	r := &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value}
	for _, h := range cdc.DeadLetterHeaders(m, cause, d.version) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if err := d.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("produce dead letter to %s: %w", topic, err)
	}
	return nil
}
