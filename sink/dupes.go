package sink

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/chunker"
)

// Dupe is a pair of live documents with similar text.
type Dupe struct {
	A, B string // document ids, A < B
	// Score is the similarity, 0–100.
	Score int
	// Method is chunker.MethodSsdeep when both documents have an ssdeep
	// hash, chunker.MethodShingle when at least one text is under ssdeep's
	// 4096-byte minimum and 3-word shingles were compared instead.
	Method string
}

// Dupes lists pairs of live documents of the index whose similarity is at
// least minScore (0–100), best first. Documents compare by ssdeep hash,
// the stored one or, for a document stored without one, one computed here
// from its chunk texts; a text at most 4096 bytes normalised has none and
// compares by shingle similarity of the chunk texts, and the pair says so
// in Method. The comparison is over all
// pairs, O(n²): meant for an operator's command, not a request path.
func (s *Store) Dupes(ctx context.Context, minScore int) ([]Dupe, error) {
	if minScore < 0 || minScore > 100 {
		return nil, fmt.Errorf("dupes: %w: min score %d is outside 0..100", ErrInvalidQuery, minScore)
	}
	type docFP struct {
		id, fuzzy, text string
		words           int
	}
	// Texts only for documents without a fuzzy hash, and for documents
	// compared with them: all texts are read when any is short.
	rows, err := s.pool.Query(ctx, "SELECT d.id, coalesce(d.fuzzy_hash, ''),"+
		" coalesce((SELECT string_agg(c.text, ' ' ORDER BY c.position) FROM "+s.tChunks+" c"+
		" WHERE c.index_name = d.index_name AND c.doc_id = d.id), '')"+
		" FROM "+s.tDocs+" d WHERE d.index_name = $1 AND d.deleted_at IS NULL ORDER BY d.id", s.cfg.Index)
	if err != nil {
		return nil, fmt.Errorf("dupes of %s: %w", s.cfg.Index, hintMigrate(err, s.cfg.Schema))
	}
	docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (docFP, error) {
		var d docFP
		if err := r.Scan(&d.id, &d.fuzzy, &d.text); err != nil {
			return d, err
		}
		if d.fuzzy == "" {
			// The pipeline hashes only updated documents (the hash cost a
			// tenth of an initial load's CPU); hashing here is O(n) against
			// the O(n²) comparison below.
			if h, err := chunker.FuzzyHash(d.text); err == nil {
				d.fuzzy = h
			}
		}
		d.words = len(chunker.Words(d.text))
		return d, nil
	})
	if err != nil {
		return nil, fmt.Errorf("dupes of %s: %w", s.cfg.Index, err)
	}
	var out []Dupe
	for i := range docs {
		for j := i + 1; j < len(docs); j++ {
			a, b := docs[i], docs[j]
			if a.fuzzy != "" && b.fuzzy != "" {
				sc, err := chunker.FuzzyScore(a.fuzzy, b.fuzzy)
				if err == nil && sc >= minScore {
					out = append(out, Dupe{A: a.id, B: b.id, Score: sc, Method: chunker.MethodSsdeep})
				}
				if err == nil {
					continue
				}
			}
			// Shingle sets are at most the word counts, so the Jaccard
			// similarity is at most min/max: skip pairs of very different size.
			lo, hi := min(a.words, b.words), max(a.words, b.words)
			if hi > 0 && 100*(lo+2) < minScore*hi {
				continue
			}
			sc := int(chunker.ShingleSimilarity(a.text, b.text)*100 + 0.5)
			if sc >= minScore {
				out = append(out, Dupe{A: a.id, B: b.id, Score: sc, Method: chunker.MethodShingle})
			}
		}
	}
	slices.SortFunc(out, func(x, y Dupe) int {
		return cmp.Or(cmp.Compare(y.Score, x.Score), cmp.Compare(x.A, y.A), cmp.Compare(x.B, y.B))
	})
	return out, nil
}
