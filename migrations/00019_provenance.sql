-- +goose Up

-- Where each chunk came from, as columns an application can query and
-- group by. Every column is nullable: rows written before this migration
-- keep NULL, which reads as "unknown" (their provenance cannot be proven),
-- and adding a nullable column without a default rewrites no table.
-- The model and the dimensions are the index's own (indexes.model,
-- indexes.dimensions): a chunk cannot hold another model's vector, since
-- the cache and the HNSW index are keyed by them, so they are not repeated
-- on every row; the published view shows them beside each chunk.
ALTER TABLE chunks
    -- The model name the provider reported when it embedded this vector
    -- (for a vector taken from the embedding cache, what it reported when
    -- the cache entry was written).
    ADD COLUMN model_version   text,
    -- The chunker's strategy and parameters (chunker.Config.Fingerprint).
    ADD COLUMN chunker         text,
    -- The change that wrote the row: its source, its position in that
    -- source, its commit time and its trace id.
    ADD COLUMN source          text,
    ADD COLUMN source_position text,
    ADD COLUMN committed_at    timestamptz,
    ADD COLUMN trace_id        text;

-- The model name the provider reported for a cached vector.
ALTER TABLE embedding_cache ADD COLUMN model_version text;

-- A hash of the chunker fingerprint and the rendered text: an update whose
-- hash equals the stored one cuts the same chunks, so only its metadata is
-- written. NULL (rows written before) never matches.
ALTER TABLE documents ADD COLUMN render_hash text;

-- The chunker fingerprint the index was last started with, so that a
-- change of chunker settings is reported at start.
ALTER TABLE indexes ADD COLUMN chunker text;

-- +goose Down
-- The views of indexes and aliases read the provenance columns since this
-- version: each is replaced by its earlier definition first (a view built
-- on one of them makes this fail, naming it, rather than being dropped).
-- +goose StatementBegin
DO $$
DECLARE v record;
BEGIN
    FOR v IN
        SELECT i.name || '_index' AS view, i.name AS index, i.dimensions FROM indexes i
        UNION ALL
        SELECT a.name || '_chunks', a.index_name, i.dimensions FROM aliases a JOIN indexes i ON i.name = a.index_name
    LOOP
        IF to_regclass(quote_ident(current_schema()) || '.' || quote_ident(v.view)) IS NOT NULL THEN
            EXECUTE format('DROP VIEW %I', v.view);
            EXECUTE format('CREATE VIEW %I AS SELECT c.id, c.doc_id, c.position, c.text, d.metadata, d.tenant, d.source_table, d.doc_key,'
                || ' c.embedding::vector(%s) AS embedding FROM chunks c JOIN documents d ON d.index_name = c.index_name AND d.id = c.doc_id'
                || ' WHERE c.index_name = %L AND d.deleted_at IS NULL', v.view, v.dimensions, v.index);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE indexes DROP COLUMN chunker;
ALTER TABLE documents DROP COLUMN render_hash;
ALTER TABLE embedding_cache DROP COLUMN model_version;
ALTER TABLE chunks
    DROP COLUMN model_version, DROP COLUMN chunker, DROP COLUMN source,
    DROP COLUMN source_position, DROP COLUMN committed_at, DROP COLUMN trace_id;
