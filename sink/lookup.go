package sink

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Lookup is what the pipeline reads of a document before embedding it.
type Lookup struct {
	// Doc is the stored document; Found is false if the index never saw it.
	Doc   StoredDocument
	Found bool
	// Chunks are its stored chunks with their vectors' origins, as
	// StoredChunks returns them.
	Chunks []StoredChunk
	// Cached holds the hashes asked for that have a cached vector, as
	// Cached returns them.
	Cached map[string]bool
}

// Lookup reads document id, its stored chunks and which of hashes have a
// cached vector in one round trip, where Document, StoredChunks and Cached
// cost one each. It marks the cached entries used, as Cached does. The three reads are separate statements, each with its own
// snapshot, as the separate calls were: the sink fences again under the
// row lock, so what they return only decides what to embed.
func (s *Store) Lookup(ctx context.Context, id string, hashes []string) (Lookup, error) {
	l := Lookup{Cached: make(map[string]bool, len(hashes))}
	b := &pgx.Batch{}
	b.Queue(s.documentSQL(), s.cfg.Index, id)
	b.Queue(s.storedChunksSQL(), s.cfg.Index, id, s.cfg.Model, s.cfg.Dimensions)
	if len(hashes) > 0 {
		b.Queue(s.cachedSQL(), s.cachedArgs(hashes)...)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	fail := func(what string, err error) (Lookup, error) {
		return Lookup{}, fmt.Errorf("look up %s: %s: %w", id, what, classify(err, s.cfg.Schema))
	}
	var err error
	if l.Doc, l.Found, err = scanDocument(br.QueryRow(), id); err != nil {
		return fail("read document", err)
	}
	rows, err := br.Query()
	if err != nil {
		return fail("read chunks", err)
	}
	if l.Chunks, err = pgx.CollectRows(rows, scanStoredChunk); err != nil {
		return fail("read chunks", err)
	}
	if len(hashes) > 0 {
		rows, err := br.Query()
		if err != nil {
			return fail("look up the cache", err)
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fail("look up the cache", err)
		}
		for _, h := range have {
			l.Cached[h] = true
		}
	}
	if err := br.Close(); err != nil {
		return fail("read", err)
	}
	return l, nil
}
