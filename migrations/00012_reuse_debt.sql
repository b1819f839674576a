-- +goose Up

-- The debt of near-duplicate reuse. A chunk row whose vector was computed
-- from another text (vector_hash <> content_hash) is in debt until a fresh
-- vector of its own text replaces it: debt_since is when the chunk first
-- stood on a borrowed vector (a chain of edits reusing the same origin
-- keeps the first date, so no vector stays borrowed past the repayment
-- window), debt_distance the cosine distance predicted for it, and
-- debt_new_words whether its text has words the origin lacks. NULL
-- debt_since means the vector is the chunk's own.
ALTER TABLE chunks
    ADD COLUMN debt_since timestamptz,
    ADD COLUMN debt_distance real,
    ADD COLUMN debt_new_words boolean NOT NULL DEFAULT false;

-- Reuses written before this migration are debt from now on, of unknown
-- distance (repaid first among equals).
UPDATE chunks SET debt_since = now()
 WHERE vector_hash IS NOT NULL AND vector_hash <> content_hash;

-- The repayment reads the outstanding debt of an index; it is small (at
-- most a window's worth of reuses), so a partial index keeps it cheap.
CREATE INDEX chunks_debt_idx ON chunks (index_name, debt_since) WHERE debt_since IS NOT NULL;

-- +goose Down
DROP INDEX chunks_debt_idx;
ALTER TABLE chunks
    DROP COLUMN debt_new_words,
    DROP COLUMN debt_distance,
    DROP COLUMN debt_since;
