package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/sink"
)

// store is the monitor's view of the index: sink.MonitorState reads and
// writes the index's tables for it; index names the index in messages.
type store struct {
	ms    *sink.MonitorState
	index string
}

func newStore(pool *pgxpool.Pool, schema, index, model string, dims int) *store {
	return &store{ms: sink.NewMonitorState(pool, schema, index, model, dims), index: index}
}

func textHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

type canary struct {
	hash, text string
	vec        []float32
	takenBy    string
	takenAt    time.Time
}

// canaries returns the stored canaries, by text hash.
func (s *store) canaries(ctx context.Context) (map[string]canary, error) {
	cs, err := s.ms.Canaries(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]canary, len(cs))
	for _, c := range cs {
		out[c.Hash] = canary{hash: c.Hash, text: c.Text, vec: c.Vector, takenBy: c.TakenBy, takenAt: c.TakenAt}
	}
	return out, nil
}

// addCanaries stores baselines taken by by; an existing baseline is kept
// (resetCanaries forgets them).
func (s *store) addCanaries(ctx context.Context, cs []canary, by string) error {
	rows := make([]sink.Canary, len(cs))
	for i, c := range cs {
		rows[i] = sink.Canary{Hash: c.hash, Text: c.text, Vector: c.vec}
	}
	return s.ms.AddCanaries(ctx, rows, by)
}

// resetCanaries forgets every baseline of the index.
func (s *store) resetCanaries(ctx context.Context) error { return s.ms.ResetCanaries(ctx) }

// sampled is a stored chunk picked for re-embedding.
type sampled struct {
	id     int64
	hash   string
	text   string
	tokens int
	vec    []float32
	kind   string
	// The chunk's provenance: "" is unknown.
	modelVersion, chunker, traceID string
}

// Sample kinds, the label of every fidelity aggregate.
const (
	KindCanary  = "canary"
	KindReused  = "reused"
	KindCached  = "cached"
	KindUniform = "uniform"
)

// sampleChunks picks up to n chunks of each kind. Reused and uniform picks
// start at random ids and take the next matching row (one index probe
// each, never a scan of the table); a chunk behind a long gap of ids is
// thus a little likelier than its neighbours. Cached picks are drawn from
// the 10·n oldest cache entries still used by a chunk.
func (s *store) sampleChunks(ctx context.Context, rng *rand.Rand, nReused, nCached, nUniform int) ([]sampled, error) {
	lo, hi, err := s.ms.ChunkIDRange(ctx)
	if err != nil {
		return nil, err
	}
	if hi == 0 {
		return nil, nil
	}
	starts := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = lo + rng.Int64N(hi-lo+1)
		}
		return out
	}
	var out []sampled
	seen := map[int64]bool{}
	collect := func(kind string, cs []sink.SampledChunk, err error) error {
		if err != nil {
			return err
		}
		for _, c := range cs {
			if seen[c.ID] {
				continue
			}
			seen[c.ID] = true
			out = append(out, sampled{id: c.ID, hash: c.Hash, text: c.Text, tokens: c.Tokens, vec: c.Vector, kind: kind,
				modelVersion: c.ModelVersion, chunker: c.Chunker, traceID: c.TraceID})
		}
		return nil
	}
	if nReused > 0 {
		// Wrap around: a start past the last reused row finds nothing.
		cs, err := s.ms.ReusedAt(ctx, starts(nReused))
		if err := collect(KindReused, cs, err); err != nil {
			return nil, err
		}
		// Few reused rows: the random starts found some twice, so take them
		// in order (the dedup above keeps each once).
		if countKind(out, KindReused) < nReused {
			cs, err := s.ms.ReusedFirst(ctx, nReused)
			if err := collect(KindReused, cs, err); err != nil {
				return nil, err
			}
		}
	}
	if nCached > 0 {
		cs, err := s.ms.CachedOldest(ctx, nCached)
		if err := collect(KindCached, cs, err); err != nil {
			return nil, err
		}
	}
	if nUniform > 0 {
		cs, err := s.ms.UniformAt(ctx, starts(nUniform))
		if err := collect(KindUniform, cs, err); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func countKind(ss []sampled, kind string) int {
	n := 0
	for _, s := range ss {
		if s.kind == kind {
			n++
		}
	}
	return n
}

// saveSamples records the measurements (the last one per chunk wins).
func (s *store) saveSamples(ctx context.Context, ms []Measurement, bound float64) error {
	rows := make([]sink.Sample, len(ms))
	for i, m := range ms {
		rows[i] = sink.Sample{ChunkID: m.ChunkID, ContentHash: m.ContentHash, Kind: m.Kind, Cosine: m.Cosine, L2: m.L2, PastBound: m.Cosine > bound}
	}
	return s.ms.SaveSamples(ctx, rows)
}
