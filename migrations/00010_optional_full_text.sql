-- +goose Up

-- Full text is optional: the generated tsvector and its GIN
-- index cost about a quarter more Postgres CPU per chunk, and only the
-- front door's degraded full-text answers read them. The column becomes a
-- plain one, written by the sink when full text is on for the index (NULL
-- otherwise); the values already computed stay.
ALTER TABLE chunks ALTER COLUMN tsv DROP EXPRESSION;

-- Whether the index's chunks were last written with full text on. A store
-- that opens with full text on after it was off fills the NULL tsv of the
-- index's chunks first. True for existing indexes: the generated column
-- filled every row.
ALTER TABLE indexes ADD COLUMN full_text boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE indexes DROP COLUMN full_text;
DROP INDEX chunks_tsv_idx;
ALTER TABLE chunks DROP COLUMN tsv;
ALTER TABLE chunks ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, text)) STORED;
CREATE INDEX chunks_tsv_idx ON chunks USING gin (tsv);
