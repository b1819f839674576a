package pipeline_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

const benchDims = 1536

// leanEmbedder returns deterministic vectors without keeping anything, so
// the heap measured is the pipeline's.
type leanEmbedder struct{}

func (leanEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		h := fnv.New64a()
		h.Write([]byte(t))
		x := h.Sum64()
		v := make([]float32, benchDims)
		for j := range v {
			v[j] = float32(int8(x>>(j%8*8))) + float32(j%7) + 0.5
		}
		out[i] = v
	}
	return out, nil
}

func (e leanEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// peakHeap samples the live heap every millisecond until stop is called
// and returns the highest value seen above the starting one.
func peakHeap() (stop func() uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > base && m.HeapAlloc-base > peak.Load() {
				peak.Store(m.HeapAlloc - base)
			}
		}
	})
	return func() uint64 { close(done); wg.Wait(); return peak.Load() }
}

// largeDoc is about n bytes of distinct paragraphs.
func largeDoc(seed, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Section %d-%d. The replication slot for tenant %d keeps WAL until the consumer confirms position %d; "+
			"operators watch lag and disk, and rotate credentials every %d days without downtime.\n\n", seed, i, i*31, i*7919, i%90)
	}
	return b.String()
}

// BenchmarkLargeDocument applies one large document and reports the peak
// live heap it took, in MiB and as a multiple of the document's size.
// "sliced" is the default path (embed_slice_chunks, vectors cached as they
// come); "whole" embeds every chunk in one call and carries the vectors to
// the sink, as the pipeline once did, as the baseline of the same run. "over
// limit" is a document over max_document_bytes, dead-lettered before
// chunking.
func BenchmarkLargeDocument(b *testing.B) {
	pool, schema := pgtest.Schema(b)
	st, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "big", Model: "lean", Dimensions: benchDims})
	require.NoError(b, err)
	ch, err := chunker.New(chunker.Config{})
	require.NoError(b, err)
	seed := 0
	for _, size := range []int{512 << 10, 2 << 20} {
		for _, mode := range []string{"whole", "sliced", "over limit"} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode, size>>10), func(b *testing.B) {
				var peakSum, n uint64
				for b.Loop() {
					seed++
					doc := largeDoc(seed, size)
					cfg := pipeline.Config{Workers: 1, MaxDocumentBytes: 4 << 20}
					switch mode {
					case "whole":
						cfg.EmbedSliceChunks = 1 << 30
					case "over limit":
						cfg.MaxDocumentBytes = size / 2
					}
					dlq := &memDLQ{}
					p, err := pipeline.New(cfg, pipeline.Stages{
						Source:   &sliceSource{batches: [][]cdc.Record{{event("c", seed, int64(seed), doc)}}},
						Splitter: ch, DeadLetters: dlq, Target: pipeline.Target{Name: "docs", Index: st, Embedder: leanEmbedder{}},
					})
					require.NoError(b, err)
					doc = ""
					stop := peakHeap()
					require.NoError(b, p.Run(context.Background()))
					peakSum += stop()
					n++
					wantDLQ := 0
					if mode == "over limit" {
						wantDLQ = 1
					}
					require.Len(b, dlq.all(), wantDLQ)
				}
				peak := float64(peakSum) / float64(n)
				b.ReportMetric(peak/(1<<20), "peak-heap-MiB")
				b.ReportMetric(peak/float64(size), "peak/doc-bytes")
			})
		}
	}
}

func (e leanEmbedder) ReportedModel() string { return "" }
