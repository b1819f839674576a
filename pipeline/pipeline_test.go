package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

const dims = 32

// countingEmbedder is an in-process stand-in for the embedding API that
// records every text it is asked to embed and can fail on demand.
type countingEmbedder struct {
	mu    sync.Mutex
	texts []string
	fail  func(texts []string) error
}

func (e *countingEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		if err := e.fail(texts); err != nil {
			return nil, err
		}
	}
	e.texts = append(e.texts, texts...)
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, dims)
		for _, w := range strings.Fields(strings.ToLower(t)) {
			h := fnv.New32a()
			h.Write([]byte(w))
			v[h.Sum32()%dims]++
		}
		var n float64
		for _, x := range v {
			n += float64(x * x)
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(n) + 1e-9)
		}
		out[i] = v
	}
	return out, nil
}

func (e *countingEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

func (e *countingEmbedder) embedded() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.texts...)
}

// sliceSource hands over fixed batches and records acknowledgements.
// sliceSource hands over its batches of Debezium JSON decoded, as the
// file source does, with a decoder of the default settings.
type sliceSource struct {
	batches [][]cdc.Record
	acked   atomic.Int32
}

var testDecoder = cdc.NewDecoder(cdc.DecoderConfig{})

func (s *sliceSource) Fetch(context.Context) (cdc.Batch, error) {
	if len(s.batches) == 0 {
		return cdc.Batch{}, io.EOF
	}
	b := slices.Clone(s.batches[0])
	s.batches = s.batches[1:]
	return cdc.Batch{Records: cdc.DecodeAll(testDecoder, b), Ack: func(context.Context) error { s.acked.Add(1); return nil }}, nil
}

type memDLQ struct {
	mu      sync.Mutex
	letters []error
}

func (d *memDLQ) Put(_ context.Context, _ cdc.Record, cause error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.letters = append(d.letters, cause)
	return nil
}

type transientErr struct{}

func (transientErr) Error() string { return "provider unavailable" }

// event renders a Debezium PostgreSQL change for public.docs.
func event(op string, id int, lsn int64, body string) cdc.Record {
	return debeziumtest.Message("docs", op, id, lsn, map[string]any{"body": body})
}

type bundle struct {
	store *sink.Store
	emb   *countingEmbedder
	dlq   *memDLQ
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	return bundle{store: st, emb: &countingEmbedder{}, dlq: &memDLQ{}}
}

func (b bundle) run(t *testing.T, src pipeline.Source, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	cfg.RetryBackoff = 1
	cfg.MaxRetryBackoff = 2
	p, err := pipeline.New(cfg, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p
}

func (b bundle) text(t *testing.T, id string) (string, bool) {
	t.Helper()
	d, ok, err := b.store.Document(t.Context(), id)
	require.NoError(t, err)
	if !ok || d.Deleted {
		return "", false
	}
	s, _ := d.Row["body"].(string)
	return s, true
}

const (
	paraA = "Tide pools hold anemones, hermit crabs and sea stars between the rocks at low water."
	paraB = "A sourdough starter needs regular feeding with flour and water to stay lively."
	paraC = "Bicycle chains stretch with wear and should be measured with a checker tool."
)

func TestOrderWithinDocumentAcrossWorkers(t *testing.T) {
	b := setup(t)
	var msgs []cdc.Record
	for v := 1; v <= 30; v++ {
		for id := 1; id <= 5; id++ {
			msgs = append(msgs, event("u", id, int64(v*100+id), fmt.Sprintf("doc %d version %d. %s", id, v, paraA)))
		}
	}
	src := &sliceSource{batches: [][]cdc.Record{msgs}}
	p := b.run(t, src, pipeline.Config{Workers: 4})
	for id := 1; id <= 5; id++ {
		txt, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
		require.True(t, ok)
		require.Contains(t, txt, "version 30.")
	}
	require.Zero(t, p.Stats()["stale"], "in-order delivery must never look stale")
	require.EqualValues(t, 1, src.acked.Load())
}

func TestEmbedsOnlyNewChunks(t *testing.T) {
	b := setup(t)
	src := &sliceSource{batches: [][]cdc.Record{
		{event("c", 1, 10, paraA+"\n\n"+paraB)},
		// Same paragraph in another document, and an edit that keeps one paragraph.
		{event("c", 2, 20, paraB), event("u", 1, 30, paraA+"\n\n"+paraC)},
	}}
	p := b.run(t, src, pipeline.Config{Workers: 1})
	var all []string
	for _, s := range b.emb.embedded() {
		all = append(all, chunker.Normalize(s))
	}
	require.Len(t, all, 3, "each distinct paragraph embedded exactly once: %q", all)
	require.Equal(t, 3, p.Stats()["chunks_embedded"])
	require.Positive(t, p.Stats()["chunks_unchanged"])
}

func TestTransientFailureRetriesUntilItWorks(t *testing.T) {
	b := setup(t)
	var calls atomic.Int32
	b.emb.fail = func([]string) error {
		if calls.Add(1) <= 7 { // more than MaxAttempts: transient errors must not give up
			return transientErr{}
		}
		return nil
	}
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}}}
	p := b.run(t, src, pipeline.Config{MaxAttempts: 3})
	_, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Empty(t, b.dlq.letters)
	require.GreaterOrEqual(t, p.Stats()["retries"], 7)
}

func TestUnclassifiedFailureIsDeadLetteredAfterMaxAttempts(t *testing.T) {
	b := setup(t)
	var calls atomic.Int32
	b.emb.fail = func(texts []string) error {
		if strings.Contains(texts[0], "poison") {
			calls.Add(1)
			return errors.New("input rejected")
		}
		return nil
	}
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, "poison "+paraA), event("c", 2, 11, paraB)}}}
	b.run(t, src, pipeline.Config{MaxAttempts: 3})
	require.EqualValues(t, 3, calls.Load())
	require.Len(t, b.dlq.letters, 1)
	require.ErrorContains(t, b.dlq.letters[0], "input rejected")
	_, ok := b.text(t, "public.docs/2")
	require.True(t, ok, "the healthy document is applied")
	require.EqualValues(t, 1, src.acked.Load(), "the batch is acknowledged once the poison is set aside")
}

func TestUndecodableMessageWithoutDLQStopsWithoutAck(t *testing.T) {
	b := setup(t)
	src := &sliceSource{batches: [][]cdc.Record{{{Raw: cdc.Raw{Topic: "t", Offset: 5, Value: []byte("{not json")}}}}}
	ch, err := chunker.New(chunker.Config{})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{}, pipeline.Stages{
		Source: src, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	err = p.Run(t.Context())
	require.ErrorContains(t, err, "no dead-letter destination")
	require.Zero(t, src.acked.Load())
}

func TestToastPlaceholderKeepsStoredText(t *testing.T) {
	b := setup(t)
	toast := event("u", 1, 20, "")
	toast.Value = []byte(strings.Replace(string(toast.Value), `"body":""`, `"body":"__debezium_unavailable_value","title":"new title"`, 1))
	src := &sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}, {toast}}}
	p := b.run(t, src, pipeline.Config{})
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, paraA, txt)
	for _, s := range b.emb.embedded() {
		require.NotContains(t, s, "__debezium_unavailable_value")
	}
	require.Equal(t, 2, p.Stats()["applied"])
}

// TestToastPlaceholderWithoutStoredRowIsDeadLettered: an update whose
// column is an unchanged TOAST value, for a document the index does not
// hold, is dead-lettered with the fix, never indexed without the column.
func TestToastPlaceholderWithoutStoredRowIsDeadLettered(t *testing.T) {
	b := setup(t)
	toast := event("u", 1, 20, "")
	toast.Value = []byte(strings.Replace(string(toast.Value), `"body":""`, `"body":"__debezium_unavailable_value","title":"new title"`, 1))
	src := &sliceSource{batches: [][]cdc.Record{{toast}}}
	p := b.run(t, src, pipeline.Config{})
	_, ok := b.text(t, "public.docs/1")
	require.False(t, ok, "not indexed without its body")
	require.Len(t, b.dlq.letters, 1)
	require.ErrorContains(t, b.dlq.letters[0], "REPLICA IDENTITY FULL")
	require.ErrorContains(t, b.dlq.letters[0], "body")
	require.Equal(t, 1, p.Stats()["dead_lettered"])
}

func TestTruncateIsABarrier(t *testing.T) {
	b := setup(t)
	src := &sliceSource{batches: [][]cdc.Record{{
		event("c", 1, 10, paraA), event("c", 2, 11, paraB), event("t", 0, 20, ""), event("c", 3, 30, paraC),
	}}}
	b.run(t, src, pipeline.Config{Workers: 4})
	_, ok1 := b.text(t, "public.docs/1")
	_, ok2 := b.text(t, "public.docs/2")
	_, ok3 := b.text(t, "public.docs/3")
	require.False(t, ok1)
	require.False(t, ok2)
	require.True(t, ok3, "a create after the truncate survives it")
}

func TestNewRequiresEveryStage(t *testing.T) {
	_, err := pipeline.New(pipeline.Config{}, pipeline.Stages{})
	require.ErrorContains(t, err, "no source")
	require.ErrorContains(t, err, "no splitter")
	require.ErrorContains(t, err, "primary target \"\" has no index")
	require.ErrorContains(t, err, "primary target \"\" has no embedder")
}

// gatedEmbedder holds the texts of one document until the texts of every
// other document have been embedded, or gives up after a while.
type gatedEmbedder struct {
	countingEmbedder
	slow   string // a word only the held document contains
	others int32  // embed calls to wait for
	calls  atomic.Int32
	done   chan struct{}
}

func (e *gatedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if strings.Contains(strings.Join(texts, " "), e.slow) {
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			return nil, errors.New("the other documents never got through while this one was held")
		}
	} else if e.calls.Add(1) == e.others {
		close(e.done)
	}
	return e.countingEmbedder.Embed(ctx, texts)
}

func (e *gatedEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// One slow document must hold up only itself: the other workers keep taking
// the batch's remaining documents. With documents assigned to fixed lanes,
// those sharing the slow one's lane waited behind it.
func TestSlowDocumentDoesNotHoldOthers(t *testing.T) {
	b := setup(t)
	const others = 12
	emb := &gatedEmbedder{slow: "glacier", others: others, done: make(chan struct{})}
	msgs := []cdc.Record{event("c", 1, 10, "A glacier moves slowly down the valley, carving rock as it goes.")}
	for id := 2; id <= others+1; id++ {
		msgs = append(msgs, event("c", id, int64(10*id), fmt.Sprintf("Document %d says something of its own about harbours.", id)))
	}
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	src := &sliceSource{batches: [][]cdc.Record{msgs}}
	p, err := pipeline.New(pipeline.Config{Workers: 2, MaxAttempts: 1, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: ch,
		DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, b.dlq.letters)
	for id := 1; id <= others+1; id++ {
		_, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
		require.True(t, ok, "document %d applied", id)
	}
	require.EqualValues(t, 1, src.acked.Load())
}

func (e *countingEmbedder) ReportedModel() string { return "" }

func (e *gatedEmbedder) ReportedModel() string { return "" }
