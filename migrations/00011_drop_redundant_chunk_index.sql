-- +goose Up

-- chunks_doc_idx (index_name, doc_id) repeats the leading columns of the
-- unique constraint chunks_doc_position_key (index_name, doc_id, position),
-- which serves every lookup by document as well; each chunk insert paid for
-- both. Dropping an index is quick whatever the table's size.
DROP INDEX IF EXISTS chunks_doc_idx;

-- +goose Down
CREATE INDEX IF NOT EXISTS chunks_doc_idx ON chunks (index_name, doc_id);
