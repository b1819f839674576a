-- +goose Up

-- Where a backfill stands, per index and source table, so that
-- `ragsync backfill --resume` continues after Ctrl-C or SIGKILL. last_key is
-- the keyset position (the id columns' values as text, in key order) of the
-- last row whose page the sink has committed; position is the WAL position
-- of the snapshot that page was read in (each resumed run reads in a new
-- snapshot, see docs/backfill.md).
CREATE TABLE backfill_checkpoints (
    index_name   text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    source_table text NOT NULL,
    last_key     jsonb,
    position     text,
    rows_read    bigint NOT NULL DEFAULT 0,
    done         boolean NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, source_table)
);

-- +goose Down
DROP TABLE backfill_checkpoints;
