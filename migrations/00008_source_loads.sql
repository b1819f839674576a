-- +goose Up

-- Initial loads of the Postgres source (issue 13) that finished, by
-- replication slot. A slot without a row here gets its tables loaded (again)
-- at start-up, so a crash in the middle of a load resumes it instead of
-- leaving the index with part of the tables. `ragsync slot drop` deletes the
-- row, so a new slot of the same name loads again.
CREATE TABLE source_loads (
    slot    text PRIMARY KEY,
    done_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE source_loads;
