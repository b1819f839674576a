package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// smallEmbedder is the shadow's model: 16 dimensions, counting its calls.
type smallEmbedder struct{ texts atomic.Int64 }

func (e *smallEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.texts.Add(int64(len(texts)))
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, 16)
		for j, r := range t {
			v[j%16] += float32(r%7) + 1
		}
		out[i] = v
	}
	return out, nil
}

func (e *smallEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// flakySink fails Upsert, Delete and Truncate while fail returns an
// error.
type flakySink struct {
	pipeline.Index
	fail func() error
}

func (s flakySink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	if err := s.fail(); err != nil {
		return sink.Outcome{}, err
	}
	return s.Index.Upsert(ctx, d)
}

func (s flakySink) Delete(ctx context.Context, table, key string, v cdc.Version, ts time.Time) (sink.Outcome, error) {
	if err := s.fail(); err != nil {
		return sink.Outcome{}, err
	}
	return s.Index.Delete(ctx, table, key, v, ts)
}

type shadowBundle struct {
	pool          *pgxpool.Pool
	schema        string
	primary, shad *sink.Store
	emb           *countingEmbedder
	shadowEmb     *smallEmbedder
	dlq           *memDLQ
}

func setupShadow(t *testing.T) shadowBundle {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	primary, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "docs", Model: "test", Dimensions: dims})
	require.NoError(t, err)
	shad, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Create: true, Schema: schema, Index: "docs_v2", Model: "small", Dimensions: 16})
	require.NoError(t, err)
	return shadowBundle{pool: pool, schema: schema, primary: primary, shad: shad, emb: &countingEmbedder{}, shadowEmb: &smallEmbedder{}, dlq: &memDLQ{}}
}

func (b shadowBundle) run(t *testing.T, batches [][]cdc.Record, shadowSink pipeline.Index) *pipeline.Pipeline {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Workers: 3, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: &sliceSource{batches: batches}, Splitter: ch,
		DeadLetters: b.dlq,
		Transient:   func(err error) bool { return errors.As(err, new(transientErr)) }, Target: pipeline.Target{Name: "docs", Index: b.primary, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.SetShadows([]pipeline.Target{{Name: "docs_v2", Index: shadowSink, Embedder: b.shadowEmb}}))
	require.Equal(t, []string{"docs_v2"}, p.Shadows())
	require.NoError(t, p.Run(t.Context()))
	return p
}

// docState is a document as an index holds it: version, deleted, chunk
// hashes in position order, and, for a live document, its vectors'
// dimensions.
type docState struct {
	ID, Version string
	Deleted     bool
	Hashes      []string
	Dims        []int
}

// indexState reads every document of st's index, deleted ones too, in id
// order.
func indexState(t *testing.T, st *sink.Store) []docState {
	t.Helper()
	var out []docState
	require.NoError(t, st.EachDocument(t.Context(), func(d sink.StoredDocument) error {
		out = append(out, docState{ID: d.ID, Version: d.Version.String(), Deleted: d.Deleted, Hashes: d.Hashes})
		return nil
	}))
	dims := map[string][]int{}
	require.NoError(t, st.EachLiveContent(t.Context(), func(id string, chunks []sink.LiveChunk) error {
		for _, c := range chunks {
			if !slices.Contains(dims[id], len(c.Vector)) {
				dims[id] = append(dims[id], len(c.Vector))
			}
		}
		return nil
	}))
	for i := range out {
		out[i].Dims = dims[out[i].ID]
	}
	return out
}

// sameDocs compares two indexes' documents ignoring vector sizes.
func sameDocs(t *testing.T, a, b []docState) {
	t.Helper()
	strip := func(ds []docState) []docState {
		out := make([]docState, len(ds))
		for i, d := range ds {
			d.Dims = nil
			out[i] = d
		}
		return out
	}
	require.Empty(t, cmp.Diff(strip(a), strip(b)))
}

func changes() [][]cdc.Record {
	return [][]cdc.Record{
		{event("c", 1, 10, paraA+"\n\n"+paraB), event("c", 2, 11, paraC), event("c", 3, 12, paraB)},
		{event("u", 1, 20, paraA+"\n\n"+paraC), event("d", 2, 21, "")},
		{event("c", 4, 30, paraA)},
	}
}

func TestShadowReceivesEveryChange(t *testing.T) {
	b := setupShadow(t)
	batches := changes()
	// A truncate, then a document created after it.
	batches = append(batches, []cdc.Record{event("t", 0, 40, ""), event("c", 5, 41, paraC)})
	p := b.run(t, batches, b.shad)
	primary, shadow := indexState(t, b.primary), indexState(t, b.shad)
	require.Len(t, primary, 5)
	sameDocs(t, primary, shadow)
	live := 0
	for i, d := range shadow {
		if !d.Deleted {
			live++
			require.Equal(t, []int{16}, d.Dims, "the shadow's vectors are its own model's")
			require.Equal(t, []int{dims}, primary[i].Dims)
		}
	}
	require.Equal(t, 1, live, "only document 5, created after the truncate, is live")
	require.Zero(t, p.Stats()["shadow_failed"])
	// The shadow's model embedded its own chunks (concurrent documents
	// sharing a paragraph may both embed it, in either index).
	require.Positive(t, b.shadowEmb.texts.Load())
}

func TestShadowTransientFailureRetriesWithoutDuplicates(t *testing.T) {
	b := setupShadow(t)
	var calls atomic.Int32
	flaky := flakySink{Index: b.shad, fail: func() error {
		if calls.Add(1)%3 == 1 { // every third call fails, the first one included
			return transientErr{}
		}
		return nil
	}}
	p := b.run(t, changes(), flaky)
	sameDocs(t, indexState(t, b.primary), indexState(t, b.shad))
	st := p.Stats()
	require.Positive(t, st["retries"])
	require.Positive(t, st["duplicate"], "the primary answers the replays as duplicates")
	require.Equal(t, 6, st["applied"], "each change applied once in the primary")
	require.Empty(t, b.dlq.letters)
}

func TestShadowPermanentFailureKeepsPrimary(t *testing.T) {
	b := setupShadow(t)
	broken := flakySink{Index: b.shad, fail: func() error { return fmt.Errorf("shadow schema broken") }}
	p := b.run(t, changes(), broken)
	primary := indexState(t, b.primary)
	require.Len(t, primary, 4)
	require.Empty(t, indexState(t, b.shad))
	st := p.Stats()
	require.Equal(t, 6, st["shadow_failed"])
	require.Equal(t, 6, st["applied"])
	require.Zero(t, st["retries"], "a permanent shadow failure is not retried")
	require.Empty(t, b.dlq.letters, "nothing is dead-lettered: the primary has every change")
}

// blockingSink holds the first Upsert until release is closed.
type blockingSink struct {
	pipeline.Index
	entered, release chan struct{}
	once             *sync.Once
}

func (s blockingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		<-s.release
	}
	return s.Index.Upsert(ctx, d)
}

// gatedSource hands over its first batch at once and the others once gate
// is closed.
type gatedSource struct {
	sliceSource
	gate <-chan struct{}
	n    int
}

func (s *gatedSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	if s.n > 0 {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return cdc.Batch{}, ctx.Err()
		}
	}
	s.n++
	return s.sliceSource.Fetch(ctx)
}

// SetShadows waits for the batch in flight: a change of a batch that began
// before it never reaches the new shadow half-way (reindex's second pass
// covers it, see docs/reindex.md), and every later batch does.
func TestSetShadowsWaitsForTheBatchInFlight(t *testing.T) {
	b := setupShadow(t)
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	blocking := blockingSink{Index: b.primary, entered: make(chan struct{}), release: make(chan struct{}), once: &sync.Once{}}
	// The second batch is fetched only once the swap returned: the
	// pipeline fetches while it applies, and this test is about a change
	// applied during the swap (the first) and one after it.
	swapped := make(chan struct{})
	src := &gatedSource{sliceSource: sliceSource{batches: [][]cdc.Record{{event("c", 1, 10, paraA)}, {event("c", 2, 20, paraB)}}}, gate: swapped}
	p, err := pipeline.New(pipeline.Config{Workers: 1}, pipeline.Stages{
		Source:   src,
		Splitter: ch, Target: pipeline.Target{Name: "docs", Index: blocking, Embedder: b.emb},
	})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- p.Run(t.Context()) }()
	<-blocking.entered
	go func() {
		_ = p.SetShadows([]pipeline.Target{{Name: "docs_v2", Index: b.shad, Embedder: b.shadowEmb}})
		close(swapped)
	}()
	// A wait for the swap to be pending, not a timing assertion.
	require.Eventually(t, func() bool { return pipeline.ShadowSwapPending(p) }, 30*time.Second, time.Millisecond)
	select {
	case <-swapped:
		t.Fatal("SetShadows returned while a batch was in flight")
	default:
	}
	close(blocking.release)
	<-swapped
	require.NoError(t, <-ran)
	shadow := indexState(t, b.shad)
	require.Len(t, shadow, 1, "only the batch after the swap reached the shadow")
	require.Equal(t, "public.docs/2", shadow[0].ID)
	require.Len(t, indexState(t, b.primary), 2)
}

// TestShadowEmbedsEachDistinctTextOnce: a document that repeats a
// paragraph sends the shadow's model each distinct chunk text once.
func TestShadowEmbedsEachDistinctTextOnce(t *testing.T) {
	b := setupShadow(t)
	body := paraA + "\n\n" + paraB + "\n\n" + paraA + "\n\n" + paraA
	b.run(t, [][]cdc.Record{{event("c", 1, 10, body)}}, b.shad)
	ch, err := chunker.New(chunker.Config{TargetTokens: 20, MinTokens: 5, MaxTokens: 60})
	require.NoError(t, err)
	chunks := ch.Split(body)
	distinct := map[string]bool{}
	for _, c := range chunks {
		distinct[c.Hash] = true
	}
	require.Less(t, len(distinct), len(chunks), "the document repeats chunks")
	require.EqualValues(t, len(distinct), b.shadowEmb.texts.Load())
}

// TestShadowAheadPaysNothing: a shadow that already holds a later version
// of a document (written there by a reindex pass, say) skips an older
// change of it without embedding anything, and keeps its own version;
// the primary applies the change.
func TestShadowAheadPaysNothing(t *testing.T) {
	b := setupShadow(t)
	later := cdc.Version{Kind: cdc.KindPostgres, Parts: []uint64{50, 0}}
	_, err := b.shad.Upsert(t.Context(), sink.Document{Table: "public.docs", Key: "1", Version: later,
		Chunks: []sink.Chunk{{Position: 0, Hash: "later-0", Text: "later text", Tokens: 2, Vector: make([]float32, 16)}}})
	require.NoError(t, err)
	b.run(t, [][]cdc.Record{{event("c", 1, 10, paraA)}}, b.shad)
	require.Zero(t, b.shadowEmb.texts.Load(), "nothing embedded for a change the shadow is past")
	d, ok, err := b.shad.Document(t.Context(), "public.docs/1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, later, d.Version, "the shadow keeps its later version")
	p, ok, err := b.primary.Document(t.Context(), "public.docs/1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Negative(t, p.Version.Compare(later), "the primary applied the change, at its own version")
}

func (e *smallEmbedder) ReportedModel() string { return "" }
