-- +goose Up

-- Near-duplicate reuse. A chunk row may carry a vector computed
-- from another, near-identical text: vector_hash is the content hash of the
-- text the vector was computed from (its "origin", a key of
-- embedding_cache). NULL on rows written before this migration means
-- "equal to content_hash".
ALTER TABLE chunks ADD COLUMN vector_hash text;

-- The text each cached vector was computed from, exactly as it was sent to
-- the embedding API, so reuse can compare new text with the origin (never
-- with the previous version, so small edits cannot accumulate) and the
-- monitor can re-embed a sample to measure the true distance. NULL for
-- entries cached before this migration: they are never reused as an origin.
ALTER TABLE embedding_cache ADD COLUMN text text;

-- Purge drops cache entries by last use; the index keeps that a range scan.
CREATE INDEX embedding_cache_last_used_idx ON embedding_cache (last_used_at);

-- Purge keeps cache entries a chunk row still points at.
CREATE INDEX chunks_vector_hash_idx ON chunks ((coalesce(vector_hash, content_hash)));

-- ssdeep for people: the fuzzy hash of the document's normalised text (NULL
-- when the text is at most 4096 bytes, ssdeep's minimum), and the last
-- update's edit magnitude, 0–100 similarity of old vs new text, with the
-- measure that produced it ('ssdeep' or 'shingle').
ALTER TABLE documents
    ADD COLUMN fuzzy_hash text,
    ADD COLUMN edit_similarity smallint CHECK (edit_similarity BETWEEN 0 AND 100),
    ADD COLUMN edit_method text;

-- Purge finds soft-deleted documents past the retention.
CREATE INDEX documents_deleted_idx ON documents (index_name, deleted_at) WHERE deleted_at IS NOT NULL;

-- +goose Down
DROP INDEX documents_deleted_idx;
ALTER TABLE documents
    DROP COLUMN edit_method,
    DROP COLUMN edit_similarity,
    DROP COLUMN fuzzy_hash;
DROP INDEX chunks_vector_hash_idx;
DROP INDEX embedding_cache_last_used_idx;
ALTER TABLE embedding_cache DROP COLUMN text;
ALTER TABLE chunks DROP COLUMN vector_hash;
