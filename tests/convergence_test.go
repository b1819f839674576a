package tests

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// The convergence property: after any history of changes —
// creates, one-paragraph edits, one-word edits (near-duplicate reuse),
// whitespace-only edits, deletes, re-creates, documents copied from others,
// rare truncates, replays of old events, and delivery out of order across
// documents (in order within each) — the index equals a fresh load of the
// final state: the same live documents, the same chunk hashes in order and
// the same chunk texts; each vector is the embedding of its own text, or,
// for a reused vector, of an origin text within the debt bound.

const (
	convSeeds   = 12 // each seed is a 200-change history; 12 exercise reuse and replays within the suite's time
	convChanges = 200
	convDocs    = 20
	convDims    = 32
	convMinSim  = 0.9
	convTable   = "public.docs"
)

// bowEmbedder is a deterministic in-process embedder: a normalised bag of
// words hashed into convDims buckets.
type bowEmbedder struct {
	mu    sync.Mutex
	calls int
}

func (e *bowEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	e.calls += len(texts)
	e.mu.Unlock()
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = bow(t)
	}
	return out, nil
}

func (e *bowEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

func bow(t string) []float32 {
	v := make([]float32, convDims)
	for _, w := range strings.Fields(strings.ToLower(t)) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		v[h.Sum32()%convDims]++
	}
	var n float64
	for _, x := range v {
		n += float64(x * x)
	}
	for j := range v {
		v[j] /= float32(math.Sqrt(n) + 1e-9)
	}
	return v
}

// history generates one seed's changes. Versions are Postgres LSNs from
// one counter, so they order the changes of every document.
type history struct {
	r     *rand.Rand
	lsn   int64
	docs  map[int]*docState
	vocab []string
}

type docState struct {
	paras []string
	live  bool
	lsn   int64
}

type change struct {
	doc int // -1 for a truncate
	msg cdc.Record
}

func newHistory(seed uint64) *history {
	h := &history{r: rand.New(rand.NewPCG(seed, 0x5eed)), docs: map[int]*docState{}}
	for i := range 400 {
		h.vocab = append(h.vocab, fmt.Sprintf("w%03d", i))
	}
	return h
}

func (h *history) paragraph() string {
	n := 25 + h.r.IntN(40)
	w := make([]string, n)
	for i := range w {
		w[i] = h.vocab[h.r.IntN(len(h.vocab))]
	}
	return strings.Join(w, " ") + "."
}

func (h *history) text(d *docState) string { return strings.Join(d.paras, "\n\n") }

func (h *history) msg(op string, id int, body string) cdc.Record {
	h.lsn += 8
	return debeziumtest.Message("docs", op, id, h.lsn, map[string]any{"body": body})
}

// next returns one random change and applies it to the model.
func (h *history) next() change {
	id := h.r.IntN(convDocs)
	d := h.docs[id]
	if d == nil || !d.live {
		if h.r.IntN(4) == 0 && len(h.docs) > 0 {
			// A copy of another live document's text.
			for other, od := range h.docs {
				if other != id && od.live {
					nd := &docState{paras: slices.Clone(od.paras), live: true}
					h.docs[id] = nd
					m := h.msg("c", id, h.text(nd))
					nd.lsn = h.lsn
					return change{doc: id, msg: m}
				}
			}
		}
		nd := &docState{live: true}
		for range 2 + h.r.IntN(5) {
			nd.paras = append(nd.paras, h.paragraph())
		}
		h.docs[id] = nd
		m := h.msg("c", id, h.text(nd))
		nd.lsn = h.lsn
		return change{doc: id, msg: m}
	}
	switch k := h.r.IntN(100); {
	case k < 2:
		// Truncate: every live document goes.
		for _, od := range h.docs {
			od.live = false
		}
		return change{doc: -1, msg: h.msg("t", 0, "")}
	case k < 12:
		d.live = false
		m := h.msg("d", id, "")
		d.lsn = h.lsn
		return change{doc: id, msg: m}
	case k < 40:
		// One word: a near-duplicate of the vector's origin, or not.
		p := h.r.IntN(len(d.paras))
		w := strings.Fields(d.paras[p])
		w[h.r.IntN(len(w))] = h.vocab[h.r.IntN(len(h.vocab))]
		d.paras[p] = strings.Join(w, " ")
	case k < 55:
		// Whitespace only, inside one paragraph (no blank line: that
		// would be a new paragraph).
		p := h.r.IntN(len(d.paras))
		d.paras[p] = strings.Replace(d.paras[p], " ", []string{"\n", "  ", " \t"}[h.r.IntN(3)], 1+h.r.IntN(3))
	case k < 70:
		d.paras = append(d.paras[:0:0], d.paras...)
		d.paras = slices.Insert(d.paras, h.r.IntN(len(d.paras)+1), h.paragraph())
	case k < 80 && len(d.paras) > 1:
		p := h.r.IntN(len(d.paras))
		d.paras = slices.Delete(slices.Clone(d.paras), p, p+1)
	default:
		d.paras[h.r.IntN(len(d.paras))] = h.paragraph()
	}
	m := h.msg("u", id, h.text(d))
	d.lsn = h.lsn
	return change{doc: id, msg: m}
}

// deliveries interleaves the per-document streams at random (order kept
// within a document and within the truncates), then adds duplicates and
// replays of old events at random later places.
func (h *history) deliveries(cs []change) []cdc.Record {
	queues := map[int][]cdc.Record{}
	var keys []int
	for _, c := range cs {
		if _, ok := queues[c.doc]; !ok {
			keys = append(keys, c.doc)
		}
		queues[c.doc] = append(queues[c.doc], c.msg)
	}
	var out []cdc.Record
	for len(keys) > 0 {
		i := h.r.IntN(len(keys))
		k := keys[i]
		out = append(out, queues[k][0])
		queues[k] = queues[k][1:]
		if len(queues[k]) == 0 {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	for range len(out) / 8 {
		m := out[h.r.IntN(len(out))]
		at := h.r.IntN(len(out) + 1)
		out = slices.Insert(out, at, m)
	}
	return out
}

// convIndex opens a fresh schema and a store of index name in it.
func convIndex(t *testing.T, name string) (*sink.Store, *pgxpool.Pool, string) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	st, err := sink.OpenIndex(t.Context(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: name, Model: "bow", Dimensions: convDims})
	require.NoError(t, err)
	return st, pool, schema
}

type sliceSrc struct{ batches [][]cdc.Record }

// batched is a source handing msgs over in batches of batch.
func batched(msgs []cdc.Record, batch int) *sliceSrc {
	src := &sliceSrc{}
	for len(msgs) > 0 {
		n := min(batch, len(msgs))
		src.batches = append(src.batches, msgs[:n])
		msgs = msgs[n:]
	}
	return src
}

func (s *sliceSrc) Fetch(context.Context) (cdc.Batch, error) {
	if len(s.batches) == 0 {
		return cdc.Batch{}, io.EOF
	}
	b := slices.Clone(s.batches[0])
	s.batches = s.batches[1:]
	// Decoded as the Kafka and file sources hand records over.
	return cdc.Batch{Records: cdc.DecodeAll(cdc.NewDecoder(cdc.DecoderConfig{}), b), Ack: func(context.Context) error { return nil }}, nil
}

func runPipeline(t *testing.T, st *sink.Store, msgs []cdc.Record, batch int) pipeline.Snapshot {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 80, MinTokens: 20, MaxTokens: 200})
	require.NoError(t, err)
	emb := &bowEmbedder{}
	src := batched(msgs, batch)
	// A predictor whose slope puts the similarity floor at the default
	// bound, and new words reused: this test is about reuse converging.
	reuse := pipeline.ReuseConfig{MinSimilarity: convMinSim, NewWords: pipeline.NewWordsRepayFirst,
		Predictor: pipeline.NewPredictor(0.05 / (1 - convMinSim))}
	p, err := pipeline.New(pipeline.Config{Workers: 4, RetryBackoff: 1, MaxRetryBackoff: 2, Reuse: reuse},
		pipeline.Stages{Source: src, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: st, Embedder: emb}})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p.Stats()
}

type convChunk struct {
	hash, text, vhash, origin string
	vec                       []float32
}

func indexState(t *testing.T, pool *pgxpool.Pool, schema string) map[string][]convChunk {
	t.Helper()
	rows, err := pool.Query(t.Context(), fmt.Sprintf("SELECT d.id, c.content_hash, c.text, coalesce(c.vector_hash, c.content_hash),"+
		" coalesce(e.text, ''), c.embedding FROM %[1]s.documents d LEFT JOIN %[1]s.chunks c ON c.doc_id = d.id AND c.index_name = d.index_name"+
		" LEFT JOIN %[1]s.embedding_cache e ON e.content_hash = coalesce(c.vector_hash, c.content_hash)"+
		" WHERE d.deleted_at IS NULL ORDER BY d.id, c.position", schema))
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]convChunk{}
	for rows.Next() {
		var id string
		var hash, text, vhash, origin *string
		var vec *pgvector.Vector
		require.NoError(t, rows.Scan(&id, &hash, &text, &vhash, &origin, &vec))
		if hash == nil {
			out[id] = nil
			continue
		}
		out[id] = append(out[id], convChunk{hash: *hash, text: *text, vhash: *vhash, origin: *origin, vec: vec.Slice()})
	}
	require.NoError(t, rows.Err())
	return out
}

func TestConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	// Seeds run in parallel, each in its own schemas; the totals are
	// checked once every seed has finished.
	var mu sync.Mutex
	var reused, embedded, stale int
	t.Cleanup(func() {
		t.Logf("over %d seeds: %d chunks embedded, %d reused near-duplicate vectors, %d stale changes skipped", convSeeds, embedded, reused, stale)
		if !t.Failed() {
			require.Positive(t, reused, "the histories must exercise near-duplicate reuse")
			require.Positive(t, stale, "the histories must exercise replays")
		}
	})
	for seed := range uint64(convSeeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			h := newHistory(seed)
			var cs []change
			for range convChanges {
				cs = append(cs, h.next())
			}
			msgs := h.deliveries(cs)

			replayed, rpool, rschema := convIndex(t, "conv")
			stats := runPipeline(t, replayed, msgs, 1+h.r.IntN(40))
			mu.Lock()
			reused += stats["chunks_reused"]
			embedded += stats["chunks_embedded"]
			stale += stats["stale"]
			mu.Unlock()

			// The fresh load: one create per live document at its final version.
			var fresh []cdc.Record
			for id, d := range h.docs {
				if d.live {
					m := h.msg("r", id, h.text(d))
					fresh = append(fresh, m)
				}
			}
			fstore, fpool, fschema := convIndex(t, "conv")
			runPipeline(t, fstore, fresh, len(fresh)+1)

			got, want := indexState(t, rpool, rschema), indexState(t, fpool, fschema)
			require.ElementsMatch(t, keysOf(want), keysOf(got), "live documents")
			for id, w := range want {
				g := got[id]
				require.Len(t, g, len(w), "%s: chunk count", id)
				for i := range w {
					require.Equal(t, w[i].hash, g[i].hash, "%s chunk %d: hash", id, i)
					require.Equal(t, w[i].text, g[i].text, "%s chunk %d: text", id, i)
					if g[i].vhash == g[i].hash {
						require.Equal(t, w[i].vec, g[i].vec, "%s chunk %d: exact vector", id, i)
						continue
					}
					// A reused vector: its origin's embedding, within the bound.
					require.NotEmpty(t, g[i].origin, "%s chunk %d: origin text kept", id, i)
					require.Equal(t, bow(g[i].origin), g[i].vec, "%s chunk %d: origin's vector", id, i)
					require.GreaterOrEqual(t, chunker.EditSimilarity(g[i].text, g[i].origin, 0), convMinSim,
						"%s chunk %d: debt bound", id, i)
				}
			}
		})
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (e *bowEmbedder) ReportedModel() string { return "" }
