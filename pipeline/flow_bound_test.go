package pipeline_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
)

// TestInFlightBoundsHoldWithinABatch: one batch of 40 changes to 40
// documents (as a Kafka poll of 500 records is), with the embedder slow
// enough that documents overlap. The documents applied at once stay within
// pipeline.max_in_flight_documents, and within max_in_flight_bytes counting
// what each document in flight holds (pipeline.DocumentCost), though the
// changes' own bytes are far below it: a batch does not pass the bounds by
// being admitted whole.
func TestInFlightBoundsHoldWithinABatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  pipeline.Config
		most int64
	}{
		{"documents", pipeline.Config{MaxInFlightDocuments: 4}, 4},
		// Two documents cost more than 2 × DocumentCost with their
		// changes' bytes: the third waits.
		{"bytes", pipeline.Config{MaxInFlightBytes: 2*pipeline.DocumentCost + 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			const docs = 40
			var batch []cdc.Record
			for id := 1; id <= docs; id++ {
				batch = append(batch, event("c", id, int64(100+id), fmt.Sprintf("document %d. %s", id, paraA)))
			}
			src := &sliceSource{batches: [][]cdc.Record{batch}}
			var now, peak atomic.Int64
			b.emb.fail = func([]string) error {
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				now.Add(-1)
				return nil
			}
			cfg := tc.cfg
			cfg.RetryBackoff, cfg.MaxRetryBackoff = 1, 2
			p, err := pipeline.New(cfg, pipeline.Stages{
				Source: src, Splitter: mustChunker(t),
				DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: unlockedEmbedder{b.emb}},
			})
			require.NoError(t, err)
			require.NoError(t, p.Run(t.Context()))
			require.EqualValues(t, 1, src.acked.Load())
			for id := 1; id <= docs; id++ {
				_, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
				require.True(t, ok, "document %d applied", id)
			}
			require.Positive(t, peak.Load())
			require.LessOrEqual(t, peak.Load(), tc.most, "documents embedding at once")
		})
	}
}
