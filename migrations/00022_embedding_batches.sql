-- +goose Up

-- Every batch of the batch lane (embedder.batch): the texts a reindex or
-- backfill sent through the provider's asynchronous Batch API, so that a
-- killed run resumes from the recorded ids instead of submitting (and
-- paying for) the same texts again.
--
-- A row is written before its file is uploaded (status 'uploading', with
-- the file name it is uploaded under, so a run killed before recording
-- input_file_id finds the file by name); then input_file_id is set
-- ('uploaded'); then batch_id once the batch is created (a run killed
-- before that finds the batch by its input file in the provider's list).
-- The provider's statuses follow; 'applied' means its vectors are in the
-- embedding cache. failed, expired and cancelled batches' texts fall back
-- to online requests.
CREATE TABLE embedding_batches (
    id            bigserial PRIMARY KEY,
    index_name    text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    model         text NOT NULL,
    dimensions    int NOT NULL,
    file_name     text NOT NULL UNIQUE,
    input_file_id text,
    batch_id      text,
    status        text NOT NULL,
    -- The content hashes of the texts, as the embedding cache keys them,
    -- in file order; line_inputs[k] is the number of texts of line k,
    -- whose custom_id is the hash of its first text.
    hashes        text[] NOT NULL,
    line_inputs   int[] NOT NULL,
    inputs        int NOT NULL,
    tokens        bigint NOT NULL,
    -- Texts whose vectors the batch did not give (failed lines, bad
    -- vectors, or all of an expired or failed batch).
    failed_inputs int NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    submitted_at  timestamptz,
    -- Set once the outcome is handled: the vectors cached (status applied),
    -- or the texts left to online requests (failed, expired, cancelled).
    applied_at    timestamptz
);

CREATE INDEX embedding_batches_open ON embedding_batches (index_name, model, dimensions) WHERE applied_at IS NULL;

-- +goose Down
DROP TABLE embedding_batches;
