package sink

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// lookupGroup lets concurrent Lookups share one round trip and three
// statements (see sharing): Lookups that queue while the slots are busy
// read every queued document's stored state at once (up to 32). A Lookup
// alone is read as it always was. Every document of a busy pipeline is
// looked up before it is embedded, and bench/pgcost priced the three
// statements of a Lookup at about 0.6 ms of Postgres CPU per 4 KB
// document, most of it the per-statement work (planning, the round trip)
// that a group pays once.
type lookupGroup = sharing[*lookupRequest]

type lookupRequest struct {
	id     string
	hashes []string
	// fenceOnly asks for Lookup.Doc alone (Fence): no chunk is read.
	fenceOnly bool
	done      chan struct{}
	out       Lookup
	err       error
}

func newLookupGroup(slots, max int) *lookupGroup { return newSharing[*lookupRequest](slots, max, nil) }

func (s *Store) lookupGrouped(ctx context.Context, id string, hashes []string) (Lookup, error) {
	r := &lookupRequest{id: id, hashes: hashes, done: make(chan struct{})}
	if !s.lookups.join(ctx, r, r.done, s.lookupBatch) {
		return Lookup{}, ctx.Err()
	}
	return r.out, r.err
}

// lookupBatch reads the stored state of batch's documents and completes
// every request. If the shared read fails, each request is read alone: one
// document's data (a key Postgres cannot hold, SQLSTATE 22021) fails the
// whole group's statement, and must fail only its own document, which is
// then dead-lettered, never its neighbours. A failure that is not a
// document's own (a lost connection) fails each alone too, and each caller
// retries its document as it would a failed Lookup.
func (s *Store) lookupBatch(ctx context.Context, batch []*lookupRequest) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) > 1 {
		if outs, err := s.lookupMany(ctx, batch); err == nil {
			for i, r := range batch {
				r.out = outs[i]
			}
			return
		}
	}
	for _, r := range batch {
		if r.fenceOnly {
			r.out.Doc, r.out.Found, r.err = s.fenceAlone(ctx, r.id)
			continue
		}
		r.out, r.err = s.lookupAlone(ctx, r.id, r.hashes)
	}
}

// lookupMany is Lookup for several documents in one round trip: the
// documents' fences, their stored chunks and which of all their hashes are
// cached, each read once per key (unnest and LATERAL, as the single reads
// probe, so no plan can scan an index's every row).
func (s *Store) lookupMany(ctx context.Context, batch []*lookupRequest) ([]Lookup, error) {
	var ids, chunkIDs, hashes []string
	for _, r := range batch {
		ids = append(ids, r.id)
		if !r.fenceOnly {
			chunkIDs = append(chunkIDs, r.id)
		}
		hashes = append(hashes, r.hashes...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids) // a document asked twice is read once
	slices.Sort(chunkIDs)
	chunkIDs = slices.Compact(chunkIDs)
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)

	b := &pgx.Batch{}
	b.Queue("SELECT d.id, d.source_table, d.doc_key, d.version, d.source_ts, d.deleted_at, coalesce(d.render_hash, '') FROM unnest($2::text[]) AS u(id)"+
		" CROSS JOIN LATERAL (SELECT id, source_table, doc_key, version, source_ts, deleted_at, render_hash FROM "+s.tDocs+
		" WHERE index_name = $1 AND id = u.id) d", s.cfg.Index, ids)
	if len(chunkIDs) > 0 {
		b.Queue("SELECT u.id, x.* FROM unnest($2::text[]) AS u(id) CROSS JOIN LATERAL ("+
			s.storedChunksSQLFor("u.id")+") x ORDER BY 1, 2", s.cfg.Index, chunkIDs, s.cfg.Model, s.cfg.Dimensions)
	}
	if len(hashes) > 0 {
		b.Queue(s.cachedSQL(), s.cachedArgs(hashes)...)
	}
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()

	fences := make(map[string]StoredDocument, len(batch))
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}
	var id string
	for rows.Next() {
		var d StoredDocument
		var version string
		var sourceTS, deletedAt *time.Time
		if err := rows.Scan(&id, &d.Table, &d.Key, &version, &sourceTS, &deletedAt, &d.RenderHash); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read documents: %w", err)
		}
		d.ID = id
		if err := d.setFence(version, sourceTS, deletedAt); err != nil {
			rows.Close()
			return nil, err
		}
		fences[id] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}

	chunks := make(map[string][]StoredChunk, len(batch))
	if len(chunkIDs) > 0 {
		if err := scanChunksOf(br, chunks); err != nil {
			return nil, err
		}
	}

	cached := make(map[string]bool, len(hashes))
	var stale []string
	if len(hashes) > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, fmt.Errorf("look up the cache: %w", err)
		}
		if stale, err = collectCached(rows, cached); err != nil {
			return nil, fmt.Errorf("look up the cache: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if err := s.touchStale(ctx, stale); err != nil {
		return nil, err
	}

	out := make([]Lookup, len(batch))
	for i, r := range batch {
		l := Lookup{Cached: make(map[string]bool, len(r.hashes)), Chunks: chunks[r.id]}
		if l.Chunks == nil {
			l.Chunks = []StoredChunk{}
		}
		l.Doc, l.Found = fences[r.id]
		for _, h := range r.hashes {
			if cached[h] {
				l.Cached[h] = true
			}
		}
		out[i] = l
	}
	return out, nil
}

// scanChunksOf reads the stored chunks lookupMany's chunk statement
// returns, by document id.
func scanChunksOf(br pgx.BatchResults, chunks map[string][]StoredChunk) error {
	rows, err := br.Query()
	if err != nil {
		return fmt.Errorf("read chunks: %w", err)
	}
	var id string
	var sc storedChunkScan
	dest := append([]any{&id}, sc.dest()...)
	for rows.Next() {
		sc = storedChunkScan{}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return fmt.Errorf("read chunks: %w", err)
		}
		chunks[id] = append(chunks[id], sc.chunk())
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read chunks: %w", err)
	}
	return nil
}
