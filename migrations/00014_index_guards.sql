-- +goose Up

-- family: the alias (or plain index name) an index belongs to, recorded the
-- moment `ragsync reindex --to` claims it, before a document is written, and
-- by every promote and rollback. The lifecycle commands refuse to write,
-- promote, roll back to or drop an index of another family, so a typo in
-- --to cannot merge two indexes. NULL for an index no family claimed.
ALTER TABLE indexes ADD COLUMN family text;
UPDATE indexes SET family = follows WHERE follows IS NOT NULL;
UPDATE indexes i SET family = a.name FROM aliases a WHERE i.family IS NULL AND (a.index_name = i.name OR a.previous = i.name);

-- What a checkpoint belongs to besides its index and table: the key columns
-- its last_key is a position in, and the --where condition the rows were
-- filtered by. A resume against other ones is refused. NULL in a checkpoint
-- written before these columns existed: such a checkpoint cannot be trusted.
ALTER TABLE backfill_checkpoints
    ADD COLUMN key_columns text[],
    ADD COLUMN where_sql text;

-- Which command took a canary baseline (serve, or `ragsync monitor
-- baseline`), shown by `ragsync monitor baseline --show` and the monitor's
-- status, so a baseline taken against the wrong endpoint can be seen and
-- reset.
ALTER TABLE monitor_canaries ADD COLUMN taken_by text;

-- +goose Down
-- The per-index views (sink creates <index>_index with the index) depend on
-- chunks and documents.
-- +goose StatementBegin
DO $$
DECLARE i text;
BEGIN
    FOR i IN SELECT name FROM indexes LOOP
        EXECUTE format('DROP VIEW IF EXISTS %I', i || '_index');
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE monitor_canaries DROP COLUMN taken_by;
ALTER TABLE backfill_checkpoints DROP COLUMN where_sql, DROP COLUMN key_columns;
ALTER TABLE indexes DROP COLUMN family;
