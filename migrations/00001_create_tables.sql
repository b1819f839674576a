-- +goose Up

-- One row per ragsync index. An index is one embedding model at one output
-- size; several indexes share the tables below, told apart by index_name.
CREATE TABLE indexes (
    name       text PRIMARY KEY,
    model      text NOT NULL,
    dimensions int  NOT NULL CHECK (dimensions > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The last applied state of each source document. A deleted document keeps
-- its row (deleted_at set) so that its version still fences out older
-- changes that arrive late.
CREATE TABLE documents (
    index_name   text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    id           text NOT NULL,            -- source_table || '/' || doc_key
    source_table text NOT NULL,
    doc_key      text NOT NULL,
    -- cdc.Version.String(): byte order equals version order, hence "C".
    version      text COLLATE "C" NOT NULL,
    source_ts    timestamptz,
    deleted_at   timestamptz,
    metadata     jsonb NOT NULL DEFAULT '{}',
    tenant       text,
    row          jsonb,
    -- simhash / ssdeep near-duplicate columns come in a later migration.
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, id)
);

CREATE INDEX documents_table_idx ON documents (index_name, source_table);
CREATE INDEX documents_metadata_idx ON documents USING gin (metadata jsonb_path_ops);

CREATE TABLE chunks (
    id           bigserial PRIMARY KEY,
    index_name   text NOT NULL,
    doc_id       text NOT NULL,
    position     int  NOT NULL,
    content_hash text NOT NULL,
    text         text NOT NULL,
    tokens       int  NOT NULL DEFAULT 0,
    -- No fixed dimensions: indexes of different sizes share the column; the
    -- per-index HNSW index casts to vector(D) (see sink.New).
    embedding    vector NOT NULL,
    tsv          tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED,
    FOREIGN KEY (index_name, doc_id) REFERENCES documents (index_name, id) ON DELETE CASCADE,
    -- Deferred so that one transaction can swap the positions of two chunks
    -- without a temporary position.
    CONSTRAINT chunks_doc_position_key UNIQUE (index_name, doc_id, position)
        DEFERRABLE INITIALLY DEFERRED
);

CREATE INDEX chunks_doc_idx ON chunks (index_name, doc_id);
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);

-- Vectors by content hash, so a chunk seen before (in any document) is never
-- embedded again for the same model and size.
CREATE TABLE embedding_cache (
    model        text NOT NULL,
    dimensions   int  NOT NULL,
    content_hash text NOT NULL,
    embedding    vector NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, dimensions, content_hash)
);

-- A truncate of a source table fences out older creates of documents the
-- index has not seen yet (their rows do not exist to carry the version).
CREATE TABLE truncations (
    index_name   text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    source_table text NOT NULL,
    version      text COLLATE "C" NOT NULL,
    truncated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, source_table)
);

-- +goose Down
DROP TABLE truncations;
DROP TABLE embedding_cache;
DROP TABLE chunks;
DROP TABLE documents;
DROP TABLE indexes;
