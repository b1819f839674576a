package cdc

import "context"

// Batch is a run of messages from a source together with its acknowledgement.
// Ack commits the source position past every message of the batch (Kafka
// offsets, a file position); the pipeline calls it only after each message was
// applied, skipped or dead-lettered, so a crash before Ack replays the batch
// and version fencing makes the replay a no-op.
type Batch struct {
	Messages []Message
	Ack      func(ctx context.Context) error
}
