package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/pipeline"
)

// markCheckingIndex checks, at every watermark write, that every change at
// or before the mark's line is already readable in the index: a
// watermark must never claim what a search cannot see.
type markCheckingIndex struct {
	pipeline.Index
	t      *testing.T
	lineOf func(line int64) (doc string, n int) // the change a line carries
	mu     sync.Mutex
	marks  []cdc.Mark
	bad    []string
}

func (x *markCheckingIndex) SaveMarks(ctx context.Context, marks []cdc.Mark) error {
	for _, m := range marks {
		want := map[string]int{}
		for l := int64(1); l <= m.Ord.Int64(); l++ {
			doc, n := x.lineOf(l)
			want[doc] = n
		}
		for doc, n := range want {
			d, ok, err := x.Document(ctx, doc)
			if err != nil {
				return err
			}
			got := -1
			if ok {
				got, _ = strconv.Atoi(strings.TrimPrefix(fmt.Sprint(d.Row["body"]), "edit "))
			}
			if got < n {
				x.mu.Lock()
				x.bad = append(x.bad, fmt.Sprintf("mark at line %d: %s holds edit %d, want >= %d", m.Ord.Int64(), doc, got, n))
				x.mu.Unlock()
			}
		}
	}
	x.mu.Lock()
	x.marks = append(x.marks, marks...)
	x.mu.Unlock()
	return x.Index.SaveMarks(ctx, marks)
}

// slowEmbedder answers after a random delay, so that documents finish out
// of source order.
type slowEmbedder struct{ countingEmbedder }

func (e *slowEmbedder) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
	return e.countingEmbedder.EmbedCounted(ctx, texts, tokens)
}

// TestWatermarkNeverClaimsWhatIsNotSearchable: edits of ten documents,
// applied concurrently with a provider of random latency; every
// watermark written covers only changes the index already holds, and the
// last one names the file's last line and is through the newest commit.
func TestWatermarkNeverClaimsWhatIsNotSearchable(t *testing.T) {
	b := setup(t)
	const n = 300
	var lines []string
	for i := 1; i <= n; i++ {
		m := event("u", i%10, int64(1000+i), fmt.Sprintf("edit %d", i))
		lines = append(lines, fmt.Sprintf(`{"key":%s,"value":%s}`, m.Key, m.Value))
	}
	path := t.TempDir() + "/events.jsonl"
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	src, err := file.NewSource(file.Config{Path: path, BatchSize: 7})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	idx := &markCheckingIndex{Index: b.store, t: t, lineOf: func(l int64) (string, int) {
		return "public.docs/" + strconv.Itoa(int(l)%10), int(l)
	}}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2, MaxInFlightDocuments: 10}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t), DeadLetters: b.dlq,
		Target: pipeline.Target{Name: "docs", Index: idx, Embedder: &slowEmbedder{}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	if len(idx.bad) > 0 {
		t.Fatalf("%d watermark writes claimed changes not yet searchable, e.g. %s", len(idx.bad), strings.Join(idx.bad[:min(5, len(idx.bad))], "; "))
	}
	require.NotEmpty(t, idx.marks)
	stored, err := b.store.Watermarks(t.Context())
	require.NoError(t, err)
	require.Len(t, stored, 1)
	require.Equal(t, strconv.Itoa(n), stored[0].Position)
	require.Equal(t, cdc.PositionLine, stored[0].Kind)
	require.True(t, strings.HasPrefix(stored[0].Source, "file:/"), stored[0].Source)
	require.False(t, stored[0].Through.IsZero())
	require.False(t, stored[0].Commit.IsZero())
	require.False(t, stored[0].Through.Before(stored[0].Commit))
	// p.Marks shows the same.
	shown := p.Marks()
	require.Len(t, shown, 1)
	require.Equal(t, stored[0].Position, shown[0].Position)
}

// TestWatermarkMetrics: the age and position of every lane are exported.
func TestWatermarkMetrics(t *testing.T) {
	b := setup(t)
	m := event("c", 1, 1000, "edit 1")
	path := t.TempDir() + "/events.jsonl"
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`{"key":%s,"value":%s}`, m.Key, m.Value)+"\n"), 0o600))
	src, err := file.NewSource(file.Config{Path: path})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	reg := prometheus.NewRegistry()
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2, IndexName: "docs", Registerer: reg}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t), DeadLetters: b.dlq,
		Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: &countingEmbedder{}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	families, err := reg.Gather()
	require.NoError(t, err)
	found := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			if strings.HasPrefix(f.GetName(), "ragsync_watermark_") {
				found[f.GetName()] = mt.GetGauge().GetValue()
				for _, l := range mt.GetLabel() {
					if l.GetName() == "index" {
						require.Equal(t, "docs", l.GetValue())
					}
				}
			}
		}
	}
	require.Equal(t, 1.0, found["ragsync_watermark_position"], "the last line applied")
	age, ok := found["ragsync_watermark_age_seconds"]
	require.True(t, ok)
	require.Less(t, age, 60.0, "the file was read to its end just now")
}

// failingMarksIndex refuses the first fail watermark writes, as an index
// database that is briefly unreachable would.
type failingMarksIndex struct {
	pipeline.Index
	mu   sync.Mutex
	fail int
	seen int
}

func (x *failingMarksIndex) SaveMarks(ctx context.Context, marks []cdc.Mark) error {
	x.mu.Lock()
	x.seen++
	failing := x.seen <= x.fail
	x.mu.Unlock()
	if failing {
		return fmt.Errorf("connection refused")
	}
	return x.Index.SaveMarks(ctx, marks)
}

// TestWatermarkWriteFailuresDoNotStopThePipeline: a watermark that cannot
// be written is written again later (the marks are not counted as saved),
// and nothing else fails: every change is applied and acknowledged.
func TestWatermarkWriteFailuresDoNotStopThePipeline(t *testing.T) {
	b := setup(t)
	var lines []string
	for i := 1; i <= 20; i++ {
		m := event("u", i%4, int64(1000+i), fmt.Sprintf("edit %d", i))
		lines = append(lines, fmt.Sprintf(`{"key":%s,"value":%s}`, m.Key, m.Value))
	}
	path := t.TempDir() + "/events.jsonl"
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	src, err := file.NewSource(file.Config{Path: path, BatchSize: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	idx := &failingMarksIndex{Index: b.store, fail: 1000}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t), DeadLetters: b.dlq,
		Target: pipeline.Target{Name: "docs", Index: idx, Embedder: &countingEmbedder{}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()), "a watermark that cannot be written stops nothing")
	for d := range 4 {
		_, ok := b.text(t, fmt.Sprintf("public.docs/%d", d))
		require.True(t, ok, "document %d applied", d)
	}
	stored, err := b.store.Watermarks(t.Context())
	require.NoError(t, err)
	require.Empty(t, stored, "every write failed")
	require.Empty(t, p.Marks(), "nothing shown as written")

	// The same file again, with the index answering after two refusals:
	// the last line's mark is written in the end.
	src2, err := file.NewSource(file.Config{Path: path, BatchSize: 3})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src2.Close() })
	idx = &failingMarksIndex{Index: b.store, fail: 2}
	p, err = pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src2, Splitter: mustChunker(t), DeadLetters: b.dlq,
		Target: pipeline.Target{Name: "docs", Index: idx, Embedder: &countingEmbedder{}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	stored, err = b.store.Watermarks(t.Context())
	require.NoError(t, err)
	require.Len(t, stored, 1)
	require.Equal(t, "20", stored[0].Position)
}
