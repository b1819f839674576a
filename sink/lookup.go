package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lookup is what the pipeline reads of a document before embedding it.
type Lookup struct {
	// Doc is the stored document's identity and fence: ID, Table, Key,
	// Version, SourceTS, Deleted, DeletedAt and RenderHash. Its metadata, tenant, row
	// and chunk hashes are not read (Document reads them): deciding what
	// to embed needs none of them, and the row is as large as the
	// document. Found is false if the index never saw it.
	Doc   StoredDocument
	Found bool
	// Chunks are its stored chunks with their vectors' origins, as
	// StoredChunks returns them.
	Chunks []StoredChunk
	// Cached holds the hashes asked for that have a cached vector, as
	// Cached returns them.
	Cached map[string]bool
}

// Lookup reads document id's fence (see Lookup.Doc), its stored chunks and
// which of hashes have a cached vector in one round trip, where Document,
// StoredChunks and Cached cost one each. It marks the cached entries used,
// as Cached does (a second round trip, only when an entry's mark is older
// than cacheTouchEvery). The three reads are separate statements, each with its
// own snapshot, as the separate calls were: the sink fences again under
// the row lock, so what they return only decides what to embed.
//
// Concurrent Lookups share a round trip (see lookupGroup). In Bulk mode a
// buffered version newer than the stored one is what Lookup sees.
func (s *Store) Lookup(ctx context.Context, id string, hashes []string) (Lookup, error) {
	b := s.bulk.Load()
	var pending Document
	var buffered bool
	if b != nil {
		pending, buffered = b.buffered(id)
	}
	var l Lookup
	var err error
	if s.lookups != nil {
		l, err = s.lookupGrouped(ctx, id, hashes)
	} else {
		l, err = s.lookupAlone(ctx, id, hashes)
	}
	if err != nil || b == nil {
		return l, err
	}
	if buffered && newer(pending, l.Doc, l.Found) {
		l.Doc, l.Found, l.Chunks = fence(pending), true, storedChunks(pending)
	}
	if l.Cached == nil {
		l.Cached = map[string]bool{}
	}
	b.bufferedCached(hashes, l.Cached)
	return l, nil
}

// lookupAlone is Lookup in a round trip of its own.
func (s *Store) lookupAlone(ctx context.Context, id string, hashes []string) (Lookup, error) {
	l := Lookup{Cached: make(map[string]bool, len(hashes))}
	b := &pgx.Batch{}
	b.Queue(s.fenceSQL(), s.cfg.Index, id)
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
	var stale []string
	if l.Doc, l.Found, err = scanFence(br.QueryRow(), id); err != nil {
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
		if stale, err = collectCached(rows, l.Cached); err != nil {
			return fail("look up the cache", err)
		}
	}
	if err := br.Close(); err != nil {
		return fail("read", err)
	}
	if err := s.touchStale(ctx, stale); err != nil {
		return Lookup{}, fmt.Errorf("look up %s: %w", id, err)
	}
	return l, nil
}

// Fence reads what fences a change against document id, with its render
// hash: Lookup.Doc alone, in one small read (no chunk, no row). The
// pipeline reads it before chunking an update, so an update whose text is
// unchanged pays for no chunking and no chunk read. In Bulk mode a buffered
// version newer than the stored one is what Fence sees.
func (s *Store) Fence(ctx context.Context, id string) (StoredDocument, bool, error) {
	var pending Document
	var buffered bool
	b := s.bulk.Load()
	if b != nil {
		pending, buffered = b.buffered(id)
	}
	var d StoredDocument
	var found bool
	var err error
	if s.lookups != nil {
		// Concurrent fences and Lookups share round trips.
		r := &lookupRequest{id: id, fenceOnly: true, done: make(chan struct{})}
		if !s.lookups.join(ctx, r, r.done, s.lookupBatch) {
			return StoredDocument{}, false, ctx.Err()
		}
		d, found, err = r.out.Doc, r.out.Found, r.err
	} else {
		d, found, err = s.fenceAlone(ctx, id)
	}
	if err != nil {
		return StoredDocument{}, false, err
	}
	if buffered && newer(pending, d, found) {
		return fence(pending), true, nil
	}
	return d, found, nil
}

// fenceAlone is Fence in a round trip of its own.
func (s *Store) fenceAlone(ctx context.Context, id string) (StoredDocument, bool, error) {
	d, found, err := scanFence(s.pool.QueryRow(ctx, s.fenceSQL(), s.cfg.Index, id), id)
	if err != nil {
		return StoredDocument{}, false, fmt.Errorf("read %s: %w", id, classify(err, s.cfg.Schema))
	}
	return d, found, nil
}

// fenceSQL reads what Lookup keeps of a document (see Lookup.Doc).
func (s *Store) fenceSQL() string {
	return "SELECT source_table, doc_key, version, source_ts, deleted_at, coalesce(render_hash, '') FROM " + s.tDocs +
		" WHERE index_name = $1 AND id = $2"
}

// scanFence reads the row of fenceSQL for document id; ok is false when
// there is none.
func scanFence(row pgx.Row, id string) (StoredDocument, bool, error) {
	d := StoredDocument{ID: id}
	var (
		version             string
		sourceTS, deletedAt *time.Time
	)
	err := row.Scan(&d.Table, &d.Key, &version, &sourceTS, &deletedAt, &d.RenderHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return StoredDocument{}, false, nil
	}
	if err != nil {
		return StoredDocument{}, false, err
	}
	if err := d.setFence(version, sourceTS, deletedAt); err != nil {
		return StoredDocument{}, false, err
	}
	return d, true, nil
}

// setFence fills what fences a change against the stored document: its
// version (parsed by storedVersion, which dates versions of the old text
// form by the source time), the source time and the deletion.
func (d *StoredDocument) setFence(version string, sourceTS, deletedAt *time.Time) error {
	var err error
	if d.Version, err = storedVersion(version, sourceTS); err != nil {
		return err
	}
	if sourceTS != nil {
		d.SourceTS = *sourceTS
	}
	if deletedAt != nil {
		d.Deleted, d.DeletedAt = true, *deletedAt
	}
	return nil
}
