-- +goose Up

-- How each index stores and indexes its vectors, fixed when it is created:
-- vector (the vector column, HNSW on vector(D), cosine), halfvec (the
-- halfvec column embedding_half, HNSW on halfvec(D)) or bit (the vector
-- column, HNSW on binary_quantize(embedding)::bit(D), candidates re-ranked by
-- cosine on the full vectors). Existing indexes read as vector with
-- pgvector's default HNSW parameters, which is what they were built with:
-- nothing of theirs is rebuilt.
--
-- The HNSW parameters: m and ef_construction were used to build the HNSW
-- index; ef_search and rerank_candidates (bit only) are query-time settings
-- a writer records and searches read. NULL is the default (pgvector's m 16,
-- ef_construction 64, ef_search 40; ragsync's max(10*k, 200) candidates).
--
-- Nothing here names the halfvec type: pgvector before 0.7 has none, and an
-- install on 0.5 or 0.6 must still migrate. The chunks.embedding_half column
-- (and the check that exactly one of embedding and embedding_half is set) is
-- added by ragsync when the first halfvec index is registered, which needs
-- pgvector 0.7 (see sink.Store.register).
ALTER TABLE indexes
    ADD COLUMN vector_type text NOT NULL DEFAULT 'vector'
        CHECK (vector_type IN ('vector', 'halfvec', 'bit')),
    ADD COLUMN hnsw_m int CHECK (hnsw_m BETWEEN 2 AND 100),
    ADD COLUMN hnsw_ef_construction int CHECK (hnsw_ef_construction BETWEEN 4 AND 1000),
    ADD COLUMN hnsw_ef_search int CHECK (hnsw_ef_search BETWEEN 1 AND 1000),
    ADD COLUMN rerank_candidates int CHECK (rerank_candidates > 0);

-- +goose Down
-- The earlier schema knows vector indexes only: a halfvec or bit index must
-- be dropped first (ragsync index drop NAME), or it would be left without
-- its column or read as a vector index.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM indexes WHERE vector_type <> 'vector') THEN
        RAISE EXCEPTION 'indexes % are halfvec or bit indexes, which the earlier schema cannot hold: drop them first (ragsync index drop NAME)',
            (SELECT string_agg(name, ', ' ORDER BY name) FROM indexes WHERE vector_type <> 'vector');
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE chunks DROP CONSTRAINT IF EXISTS chunks_one_embedding;
ALTER TABLE chunks DROP COLUMN IF EXISTS embedding_half;
ALTER TABLE chunks ALTER COLUMN embedding SET NOT NULL;
ALTER TABLE indexes
    DROP COLUMN rerank_candidates, DROP COLUMN hnsw_ef_search,
    DROP COLUMN hnsw_ef_construction, DROP COLUMN hnsw_m, DROP COLUMN vector_type;
