package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// chunkerChange is a chunker fingerprint a writer replaced at open.
type chunkerChange struct {
	from, to string
}

// recordChunker records the writer's chunker fingerprint (Config.Chunker)
// on the index, in register's transaction: a new index, or one that
// records none yet (registered before fingerprints were recorded), takes
// it silently; another fingerprint is replaced and kept for ChunkerChange.
func (s *Store) recordChunker(ctx context.Context, tx pgx.Tx) error {
	s.chunkerChange = nil // a retried transaction starts over
	if s.cfg.Chunker == "" {
		return nil
	}
	var was *string
	if err := tx.QueryRow(ctx, "SELECT chunker FROM "+s.tIndexes+" WHERE name = $1", s.cfg.Index).Scan(&was); err != nil {
		return fmt.Errorf("read the recorded chunker: %w", err)
	}
	if was != nil && *was == s.cfg.Chunker {
		return nil
	}
	if _, err := tx.Exec(ctx, "UPDATE "+s.tIndexes+" SET chunker = $2 WHERE name = $1", s.cfg.Index, s.cfg.Chunker); err != nil {
		return fmt.Errorf("record the chunker: %w", err)
	}
	if was != nil {
		s.chunkerChange = &chunkerChange{from: *was, to: s.cfg.Chunker}
	}
	return nil
}

// reportChunkerChange warns, once the change is recorded, that the index
// holds chunks cut with other settings, how many, and what re-cuts them.
// The count reads every chunk of the index once, only when the settings
// changed.
func (s *Store) reportChunkerChange(ctx context.Context) {
	ch := s.chunkerChange
	if ch == nil {
		return
	}
	var other, unknown int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE chunker <> $2), count(*) FILTER (WHERE chunker IS NULL) FROM "+s.tChunks+
		" WHERE index_name = $1", s.cfg.Index, ch.to).Scan(&other, &unknown)
	if err != nil {
		// The change is recorded; only the count is missing.
		s.logger.WarnContext(ctx, "count the chunks cut with other chunker settings", "error", err)
		other, unknown = -1, -1
	}
	s.logger.WarnContext(ctx, "chunker settings changed since this index was last opened for writing: its chunks cut with the other settings stay as they are"+
		" until their document is re-cut; run ragsync reindex --to NEW and ragsync index promote NEW to re-cut every document now,"+
		" otherwise each document is re-cut when it next changes (an update whose text is unchanged is re-cut too, since the stored"+
		" render hash covers the chunker fingerprint); ragsync index status shows what is left",
		"from", ch.from, "to", ch.to, "chunks_other_settings", other, "chunks_unknown_settings", unknown)
}

// ChunkerChange reports the chunker settings this writer found recorded
// on the index at open when they differ from its own (Config.Chunker):
// from is the fingerprint recorded before, to the writer's, which the
// index now records. changed is false for a reader, a writer without a
// fingerprint, a new index, an index that recorded none yet, or equal
// settings.
func (s *Store) ChunkerChange() (from, to string, changed bool) {
	if s.chunkerChange == nil {
		return "", "", false
	}
	return s.chunkerChange.from, s.chunkerChange.to, true
}

// ChunkGroup counts the chunk rows of an index written with one model
// version and one chunker. "" is unknown: a row written before either was
// recorded, whose provenance cannot be proven.
type ChunkGroup struct {
	Index        string `json:"index"`
	ModelVersion string `json:"model_version"`
	Chunker      string `json:"chunker"`
	Chunks       int64  `json:"chunks"`
	// lastID is the group's newest row (ids grow with every insert).
	lastID int64
}

// ChunkGroups counts every chunk row by index, model version and chunker
// in one GROUP BY over the chunks table (the rows of soft-deleted
// documents included, until ragsync purge removes them): index "" counts
// every index of the schema. Sorted by index, then by the most chunks.
// It reads only.
func (c *Catalog) ChunkGroups(ctx context.Context, index string) ([]ChunkGroup, error) {
	return c.chunkGroups(ctx, index, false)
}

// chunkGroups is ChunkGroups, of the live documents' chunks only when
// live (a join with the documents).
func (c *Catalog) chunkGroups(ctx context.Context, index string, live bool) ([]ChunkGroup, error) {
	q := "SELECT ch.index_name, coalesce(ch.model_version, ''), coalesce(ch.chunker, ''), count(*), max(ch.id) FROM " + c.tChunks + " ch"
	var where []string
	var args []any
	if live {
		q += " JOIN " + c.tDocs + " d ON d.index_name = ch.index_name AND d.id = ch.doc_id"
		where = append(where, "d.deleted_at IS NULL")
	}
	if index != "" {
		args = append(args, index)
		where = append(where, "ch.index_name = $1")
	}
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC, 2, 3"
	rows, err := c.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("count chunks by model version and chunker: %w", hintMigrate(err, c.schema))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChunkGroup, error) {
		var g ChunkGroup
		err := r.Scan(&g.Index, &g.ModelVersion, &g.Chunker, &g.Chunks, &g.lastID)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("count chunks by model version and chunker: %w", err)
	}
	return out, nil
}

// Leftovers is what a change of chunker settings or of the provider's
// model version has left to re-cut or re-embed in one index, and what the
// index's documents have not recorded yet. It counts the chunks of live
// documents only: those of deleted documents are not searched, and go
// with ragsync purge.
type Leftovers struct {
	Index string `json:"index"`
	// Chunker is the fingerprint the index records (its writers' last
	// settings); "" none recorded yet.
	Chunker string `json:"chunker"`
	// OtherChunker counts the chunks cut with a recorded fingerprint other
	// than Chunker.
	OtherChunker int64 `json:"chunks_other_chunker"`
	// UnknownChunker and UnknownModelVersion count the chunks written
	// before the chunker, or the model version, were recorded on each
	// chunk; Unknown those with either unknown.
	UnknownChunker      int64 `json:"chunks_unknown_chunker"`
	UnknownModelVersion int64 `json:"chunks_unknown_model_version"`
	Unknown             int64 `json:"chunks_unknown_provenance"`
	// ModelVersion is the most recent model version seen when the chunks
	// carry several (see latestModelVersion), else ""; OldModelVersion
	// counts the chunks embedded with another.
	ModelVersion    string `json:"latest_model_version,omitempty"`
	OldModelVersion int64  `json:"chunks_old_model_version"`
	// NoRenderHash counts the live documents written before render hashes
	// were recorded: the next update of each re-cuts it once, even when
	// its text did not change.
	NoRenderHash int64 `json:"documents_without_render_hash"`
	// Groups are the chunk counts they come from: ChunkGroups of the live
	// documents' chunks.
	Groups []ChunkGroup `json:"groups"`
}

// Leftovers reads what index (a physical index) has left to re-cut or
// re-embed: one GROUP BY over its live documents' chunks, one count over
// its live documents, and, only when its chunks carry several model versions, a
// look at the embedding cache for the newest. It reads only.
func (c *Catalog) Leftovers(ctx context.Context, index string) (Leftovers, error) {
	x, ok, err := c.index(ctx, c.pool, index)
	if err != nil {
		return Leftovers{}, fmt.Errorf("index %s: %w", index, hintMigrate(err, c.schema))
	}
	if !ok {
		return Leftovers{}, fmt.Errorf("index %s: %w", index, ErrNoIndex)
	}
	l := Leftovers{Index: index}
	var chunker *string
	if err := c.pool.QueryRow(ctx, "SELECT chunker FROM "+c.tIndexes+" WHERE name = $1", index).Scan(&chunker); err != nil {
		return Leftovers{}, fmt.Errorf("read the recorded chunker of %s: %w", index, hintMigrate(err, c.schema))
	}
	if chunker != nil {
		l.Chunker = *chunker
	}
	if l.Groups, err = c.chunkGroups(ctx, index, true); err != nil {
		return Leftovers{}, err
	}
	versions := map[string]bool{}
	for _, g := range l.Groups {
		switch {
		case g.Chunker == "":
			l.UnknownChunker += g.Chunks
		case l.Chunker != "" && g.Chunker != l.Chunker:
			l.OtherChunker += g.Chunks
		}
		if g.ModelVersion == "" {
			l.UnknownModelVersion += g.Chunks
		} else {
			versions[g.ModelVersion] = true
		}
		if g.Chunker == "" || g.ModelVersion == "" {
			l.Unknown += g.Chunks
		}
	}
	if len(versions) > 1 {
		if l.ModelVersion, err = c.latestModelVersion(ctx, x, versions, l.Groups); err != nil {
			return Leftovers{}, err
		}
		for _, g := range l.Groups {
			if g.ModelVersion != "" && g.ModelVersion != l.ModelVersion {
				l.OldModelVersion += g.Chunks
			}
		}
	}
	err = c.pool.QueryRow(ctx, "SELECT count(*) FROM "+c.tDocs+" WHERE index_name = $1 AND deleted_at IS NULL AND render_hash IS NULL", index).Scan(&l.NoRenderHash)
	if err != nil {
		return Leftovers{}, fmt.Errorf("count the documents without a render hash in %s: %w", index, err)
	}
	return l, nil
}

// latestModelVersion is the newest of versions, the model versions an
// index's chunks carry: the one the provider reported when it last
// embedded a text for the index's model and dimensions (the newest
// embedding-cache entry that records one of them). A chunk's version is
// not the answer on its own: a new chunk whose text was embedded before
// takes the cached vector and its older version. Without such a cache
// entry (purged), the version of the most recently inserted chunk.
func (c *Catalog) latestModelVersion(ctx context.Context, x IndexInfo, versions map[string]bool, groups []ChunkGroup) (string, error) {
	list := make([]string, 0, len(versions))
	for v := range versions {
		list = append(list, v)
	}
	var latest string
	err := c.pool.QueryRow(ctx, "SELECT model_version FROM "+pgx.Identifier{c.schema, "embedding_cache"}.Sanitize()+
		" WHERE model = $1 AND dimensions = $2 AND model_version = ANY($3) ORDER BY created_at DESC LIMIT 1",
		x.Model, x.Dimensions, list).Scan(&latest)
	switch {
	case err == nil:
		return latest, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("read the newest model version of %s: %w", x.Name, err)
	}
	var last int64
	for _, g := range groups {
		if g.ModelVersion != "" && g.lastID > last {
			latest, last = g.ModelVersion, g.lastID
		}
	}
	return latest, nil
}
