package backfill

import (
	"context"

	"github.com/ragsync/ragsync/sink"
)

// Checkpoint is where the backfill of one table stands and what it belongs
// to (sink.Checkpoint: the sink owns the table that keeps them).
type Checkpoint = sink.Checkpoint

// Checkpoints keeps the checkpoints of one index: sink.Checkpoints, or nil
// for a run that keeps none (a dry run).
type Checkpoints interface {
	Save(ctx context.Context, cp Checkpoint) error
	Load(ctx context.Context, table string) (Checkpoint, bool, error)
	Reset(ctx context.Context, tables []string) error
}
