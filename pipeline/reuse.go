package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/sink"
)

// DefaultMinSimilarity is ReuseConfig.MinSimilarity's default. With ~350-word
// chunks it lets a chunk keep its vector while at most ~10% of its words
// changed against the vector's origin (EditSimilarity 1 − D/(n+m); one
// replaced word costs D = 2). Tuned on edits-C (issue 3): 0.97 → 0.90 → 0.80
// sent 0.90 → 0.77 → 0.69 of G's update tokens with recall@5 unchanged; 0.90
// keeps the worst reused vector within cosine distance 0.24 of a fresh one
// under the (harsh) feature-hashing test embedder.
const DefaultMinSimilarity = 0.90

// Reuse measures, see ReuseConfig.Method.
const (
	ReuseMethodEdit    = "edit"
	ReuseMethodShingle = "shingle"
)

// ReuseConfig bounds the "embedding debt" of near-duplicate reuse: a chunk
// whose exact content hash was never embedded may take the vector of one of
// its document's stored chunks when its normalised text is at least
// MinSimilarity similar to the ORIGIN text of that vector, the text the
// vector was computed from. Comparing with the origin, never with the
// previous version, keeps small edits from accumulating: after enough of
// them the text drifts past the bound and is embedded again, becoming the
// new origin. The chunk row records the origin hash (sink.Chunk.VectorHash)
// and the cache keeps the origin text, so the monitor can re-embed a sample
// and measure the true distance.
type ReuseConfig struct {
	// Disabled turns near-duplicate reuse off: every new content hash is
	// embedded. Defaults to false (reuse on).
	Disabled bool
	// MinSimilarity is the least similarity, in (0, 1], between a new
	// chunk's text and a stored vector's origin text for the vector to be
	// reused; 1 reuses only texts equal after normalisation, which the
	// content hash already does. Defaults to DefaultMinSimilarity.
	MinSimilarity float64
	// Method is the similarity measure: "edit" (word-level edit
	// similarity, 1 − D/(n+m)) or "shingle" (Jaccard of 3-word shingles,
	// about 3× stricter per changed word). ssdeep is not offered: most
	// chunks are far under its 4096-byte minimum. Defaults to "edit".
	Method string
}

func (c ReuseConfig) withDefaults() ReuseConfig {
	if c.MinSimilarity == 0 {
		c.MinSimilarity = DefaultMinSimilarity
	}
	if c.Method == "" {
		c.Method = ReuseMethodEdit
	}
	return c
}

// Validate reports every invalid field, named by its ragsync.yaml path.
func (c ReuseConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.MinSimilarity <= 0 || c.MinSimilarity > 1 {
		errs = append(errs, fmt.Errorf("reuse.min_similarity: %v must be in (0, 1], e.g. 0.9; set reuse.enabled: false to turn reuse off", c.MinSimilarity))
	}
	if c.Method != ReuseMethodEdit && c.Method != ReuseMethodShingle {
		errs = append(errs, fmt.Errorf("reuse.method: %q is not one of edit, shingle", c.Method))
	}
	return errors.Join(errs...)
}

// similarity scores two normalised word lists by the configured method.
func (c ReuseConfig) similarity(a, b string) float64 {
	if c.Method == ReuseMethodShingle {
		return chunker.ShingleSimilarity(a, b)
	}
	return chunker.EditSimilarity(a, b, c.MinSimilarity)
}

// ChunkStore is what near-duplicate reuse and edit measurement need from the
// sink: the stored chunks of a document with their vectors' origins. Every
// Sink has it.
type ChunkStore interface {
	StoredChunks(ctx context.Context, id string) ([]sink.StoredChunk, error)
}

// ReuseEmbedder is an Embedder that carries the reuse settings to the
// pipeline. Pipeline.Config has no reuse field yet, so the setting travels
// with the stage it changes: wrap the embedder with WithReuse. A pipeline
// whose embedder is not wrapped reuses with the defaults.
type ReuseEmbedder struct {
	Embedder
	Reuse ReuseConfig
}

// WithReuse wraps e so the pipeline applies cfg; the error is
// cfg.Validate's.
func WithReuse(e Embedder, cfg ReuseConfig) (*ReuseEmbedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ReuseEmbedder{Embedder: e, Reuse: cfg.withDefaults()}, nil
}

// EmbedCounted passes the counts on when the wrapped Embedder takes them,
// so wrapping does not hide the capability.
func (r *ReuseEmbedder) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if ce, ok := r.Embedder.(CountingEmbedder); ok {
		return ce.EmbedCounted(ctx, texts, tokens)
	}
	return r.Embedder.Embed(ctx, texts)
}

// reuseConfig is the pipeline's reuse setting.
func (p *Pipeline) reuseConfig() ReuseConfig {
	if r, ok := p.st.Embedder.(*ReuseEmbedder); ok {
		return r.Reuse
	}
	return ReuseConfig{}.withDefaults()
}

// origin is a stored vector a new chunk may take.
type origin struct {
	hash string
	text string // normalised
}

// planReuse fills VectorHash for each chunk in missing (indexes into
// doc.Chunks) that can take a stored vector: one already stored for the
// same content (its row's origin), else the most similar origin text at
// or above the bound. It returns the indexes still to embed.
func (p *Pipeline) planReuse(cfg ReuseConfig, stored []sink.StoredChunk, doc *sink.Document, missing []int) []int {
	byHash := make(map[string]sink.StoredChunk, len(stored))
	var origins []origin
	seen := map[string]bool{}
	for _, s := range stored {
		if s.OriginCached {
			byHash[s.Hash] = s
		}
		if s.OriginCached && s.OriginText != "" && !seen[s.VectorHash] {
			seen[s.VectorHash] = true
			origins = append(origins, origin{hash: s.VectorHash, text: chunker.Normalize(s.OriginText)})
		}
	}
	var rest []int
	for _, i := range missing {
		c := &doc.Chunks[i]
		// Same content as a stored chunk whose vector is reused: keep
		// that chunk's origin, the bound was checked when it was chosen.
		if s, ok := byHash[c.Hash]; ok && s.VectorHash != c.Hash {
			c.VectorHash = s.VectorHash
			continue
		}
		text := chunker.Normalize(c.Text)
		best, bestSim := "", 0.0
		for _, o := range origins {
			if sim := cfg.similarity(text, o.text); sim >= cfg.MinSimilarity && sim > bestSim {
				best, bestSim = o.hash, sim
			}
		}
		if best == "" {
			rest = append(rest, i)
			continue
		}
		c.VectorHash = best
	}
	return rest
}
