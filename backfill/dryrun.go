package backfill

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// store is the part of the sink a dry run reads: the fence, the cache and
// the stored chunks for reuse (in one Lookup). Writes never reach it.
type store interface {
	Document(ctx context.Context, id string) (sink.StoredDocument, bool, error)
	Fence(ctx context.Context, id string) (sink.StoredDocument, bool, error)
	Cached(ctx context.Context, hashes []string) (map[string]bool, error)
	Lookup(ctx context.Context, id string, hashes []string) (sink.Lookup, error)
}

// DryRun stands in for the embedder and the sink of a pipeline, so that a
// backfill reads, renders and chunks every row exactly as a real run would,
// and counts what it would send to the embedding API after the cache,
// without calling it or writing anything. Safe for concurrent use.
type DryRun struct {
	st   store
	dims int

	mu       sync.Mutex
	known    map[string]bool // hashes a real run would have cached by now
	estimate Estimate
}

// Estimate is what a backfill would cost.
type Estimate struct {
	Documents int64 // documents that would be written
	Chunks    int64 // chunks of those documents
	Texts     int64 // texts sent to the embedding API (after the cache)
	Tokens    int64 // their cl100k_base tokens
	Requests  int64 // embedding calls, before batching splits them
}

// NewDryRun wraps st; vectors it pretends to compute have dims dimensions.
// A nil st is an index that does not exist yet (a first backfill's dry
// run): nothing is cached or stored, so every document is new and every
// chunk is embedded once.
func NewDryRun(st store, dims int) *DryRun {
	return &DryRun{st: st, dims: dims, known: map[string]bool{}}
}

// Estimate returns the counts so far.
func (d *DryRun) Estimate() Estimate {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.estimate
}

// Embed counts texts and their tokens and returns zero vectors.
func (d *DryRun) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return d.EmbedCounted(ctx, texts, nil)
}

// EmbedCounted is Embed trusting the chunker's counts (tokens[i] counts
// texts[i]; nil: count them), as the real client does.
func (d *DryRun) EmbedCounted(_ context.Context, texts []string, counts []int) ([][]float32, error) {
	var tokens int64
	for i, t := range texts {
		if counts != nil {
			tokens += int64(counts[i])
		} else {
			tokens += int64(chunker.CountTokens(t))
		}
	}
	d.mu.Lock()
	d.estimate.Texts += int64(len(texts))
	d.estimate.Tokens += tokens
	d.estimate.Requests++
	d.mu.Unlock()
	vecs := make([][]float32, len(texts))
	for i := range vecs {
		vecs[i] = make([]float32, d.dims)
	}
	return vecs, nil
}

// Upsert counts the document and remembers its chunks' hashes, which a real
// run would have cached from here on; nothing is written.
func (d *DryRun) Upsert(_ context.Context, doc sink.Document) (sink.Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.estimate.Documents++
	d.estimate.Chunks += int64(len(doc.Chunks))
	for _, c := range doc.Chunks {
		d.known[c.Hash] = true
	}
	return sink.Outcome{Applied: true, Inserted: len(doc.Chunks)}, nil
}

// Delete writes nothing.
func (d *DryRun) Delete(context.Context, string, string, cdc.Version, time.Time) (sink.Outcome, error) {
	return sink.Outcome{Applied: true}, nil
}

// Truncate writes nothing.
func (d *DryRun) Truncate(context.Context, string, cdc.Version, time.Time) (int, error) {
	return 0, nil
}

// Document reads the stored document: the fence applies as in a real run.
func (d *DryRun) Document(ctx context.Context, id string) (sink.StoredDocument, bool, error) {
	if d.st == nil {
		return sink.StoredDocument{}, false, nil
	}
	return d.st.Document(ctx, id)
}

// Fence is the store's Fence; without a store, no document is known.
func (d *DryRun) Fence(ctx context.Context, id string) (sink.StoredDocument, bool, error) {
	if d.st == nil {
		return sink.StoredDocument{}, false, nil
	}
	return d.st.Fence(ctx, id)
}

// Cost is the estimate's price at pricePerMillion per million tokens.
func (e Estimate) Cost(pricePerMillion float64) float64 {
	return float64(e.Tokens) / 1e6 * pricePerMillion
}

// Duration is how long the embedding calls take at the given limits (0
// means no limit): the slower of the request and the token budget.
func (e Estimate) Duration(requestsPerMinute, tokensPerMinute int) time.Duration {
	var minutes float64
	if requestsPerMinute > 0 {
		minutes = float64(e.Requests) / float64(requestsPerMinute)
	}
	if tokensPerMinute > 0 {
		minutes = math.Max(minutes, float64(e.Tokens)/float64(tokensPerMinute))
	}
	return time.Duration(minutes * float64(time.Minute))
}

// CacheVectors writes nothing; the hashes count as cached from here on, as
// a real run's would be.
func (d *DryRun) CacheVectors(_ context.Context, hashes, _ []string, _ [][]float32, _ string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range hashes {
		d.known[h] = true
	}
	return nil
}

// Cached answers from the index's cache, when there is an index, and from
// what this run would have cached by now.
func (d *DryRun) Cached(ctx context.Context, hashes []string) (map[string]bool, error) {
	got := map[string]bool{}
	if d.st != nil {
		var err error
		if got, err = d.st.Cached(ctx, hashes); err != nil {
			return nil, err
		}
		if got == nil {
			got = map[string]bool{}
		}
	}
	d.addKnown(got, hashes)
	return got, nil
}

// Lookup reads the index, when there is one, with what this run would have
// cached by now counted as cached.
func (d *DryRun) Lookup(ctx context.Context, id string, hashes []string) (sink.Lookup, error) {
	var l sink.Lookup
	if d.st != nil {
		var err error
		if l, err = d.st.Lookup(ctx, id, hashes); err != nil {
			return sink.Lookup{}, err
		}
	}
	if l.Cached == nil {
		l.Cached = map[string]bool{}
	}
	d.addKnown(l.Cached, hashes)
	return l, nil
}

func (d *DryRun) addKnown(into map[string]bool, hashes []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range hashes {
		if d.known[h] {
			into[h] = true
		}
	}
}

// Flush has nothing to make durable: a dry run writes nothing.
func (d *DryRun) Flush(context.Context) error { return nil }

// ReportedModel is "": a dry run calls no provider.
func (d *DryRun) ReportedModel() string { return "" }

// SaveMarks records nothing: a dry run writes nothing.
func (d *DryRun) SaveMarks(context.Context, []cdc.Mark) error { return nil }
