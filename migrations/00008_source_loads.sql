-- +goose Up

-- Initial loads of the Postgres source, by replication slot.
-- done_at is set once every loaded row is in the index; until then a start
-- loads again, from progress_table/progress_key (the last primary key whose
-- row is in the index) when set, so a crash in the middle of a long load
-- resumes it instead of starting over. `ragsync slot drop` deletes the row,
-- so a new slot of the same name loads everything again.
CREATE TABLE source_loads (
    slot           text PRIMARY KEY,
    done_at        timestamptz,
    progress_table text,
    progress_key   text[]
);

-- +goose Down
DROP TABLE source_loads;
