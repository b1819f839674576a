package chunker

import "fmt"

// SuggestedRefineTargetTokens is the Config.RefineTargetTokens to set for
// documents edited in place over and over: on the edits-C history (long
// Markdown documents, at target_tokens 470) refining at 64 tokens spends
// 0.59 × the tokens of greedy chunking with exact hashing on the updates,
// against 0.94 × unrefined and 0.70 × at 128, for 1.5 × the rows (2.4 ×
// when every chunk is cut at 128); see docs/write-path.md, "The trade, measured".
// Refinement is off by default: it makes what the index holds depend on
// which regions were edited (a replay or a backfill gives back the chunks
// stored, but a fresh load of the final state cuts nothing finer), and the
// mixed chunk sizes cost recall under the hashing embedder.
const SuggestedRefineTargetTokens = 64

// RefineOff is the Config.RefineTargetTokens that turns refinement off.
const RefineOff = -1

// minRefineTarget keeps the fine pieces' min_tokens (a quarter of the
// target) at least 1.
const minRefineTarget = 4

// Refines reports whether Refine cuts anything: RefineTargetTokens is not
// RefineOff.
func (c *Chunker) Refines() bool { return c.cfg.RefineTargetTokens > 0 }

// fineConfig is the content-defined chunker Refine cuts with: target
// RefineTargetTokens, min a quarter of it, max four times it.
func (c Config) fineConfig() Config {
	t := c.RefineTargetTokens
	return Config{Strategy: StrategyContentDefined, TargetTokens: t, MinTokens: max(t/4, 1), MaxTokens: max(4*t, minMaxTokens), RefineTargetTokens: RefineOff}
}

func (c Config) validateRefine() error {
	t := c.RefineTargetTokens
	switch {
	case t == RefineOff:
		return nil
	case t < minRefineTarget:
		return fmt.Errorf("chunker.refine_target_tokens: must be >= %d, or %d to turn refinement off, got %d", minRefineTarget, RefineOff, t)
	case t >= c.TargetTokens:
		return fmt.Errorf("chunker.refine_target_tokens: must be below target_tokens (%d) to cut finer, or %d to turn refinement off, got %d", c.TargetTokens, RefineOff, t)
	}
	return nil
}

// Refine returns chunks with every chunk that keep rejects cut again into
// finer content-defined pieces (target Config.RefineTargetTokens, min a
// quarter, max four times it), and every chunk keep accepts as it is, in
// document order with Position renumbered. The pieces are exact substrings
// of the chunk they come from, so of the document, each with its own Hash
// and Tokens. With refinement off it returns chunks unchanged.
//
// It is how an update refines only the regions that change: chunks is the
// document's Split, and keep reports the hashes the document has stored.
// An unchanged chunk keeps its stored hash; an edited one is cut finer, so
// the next edit of the same region re-embeds about one fine piece instead
// of the whole chunk. A chunk once refined is not stored as such, so it
// never matches again and its region stays fine; and the pieces' boundaries
// are content-defined from the chunk's start, so within it they
// resynchronise past an edit and the pieces it did not touch keep their
// hashes. The rule holds no state: it depends only on the new text and the
// stored hashes, so the chunks of a document are always its Split with
// some chunks replaced by their refinement (Chunker.RefineChunk).
func (c *Chunker) Refine(chunks []Chunk, keep func(hash string) bool) []Chunk {
	if !c.Refines() {
		return chunks
	}
	fine := c.fine()
	out := make([]Chunk, 0, len(chunks))
	for _, ch := range chunks {
		if keep(ch.Hash) {
			ch.Position = len(out)
			out = append(out, ch)
			continue
		}
		for _, f := range fine.Split(ch.Text) {
			f.Position = len(out)
			out = append(out, f)
		}
	}
	return out
}

// RefineChunk returns the pieces Refine cuts a chunk of text into, with
// Position counted from 0, or nil with refinement off.
func (c *Chunker) RefineChunk(text string) []Chunk {
	if !c.Refines() {
		return nil
	}
	return c.fine().Split(text)
}

// fine returns the chunker Refine cuts with. Building it costs nothing
// worth keeping: its strategy is a few numbers.
func (c *Chunker) fine() *Chunker {
	cfg := c.cfg.fineConfig()
	return &Chunker{cfg: cfg, strategy: newContentDefined(cfg)}
}
