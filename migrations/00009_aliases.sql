-- +goose Up

-- Blue/green re-indexing. An alias names the index that queries
-- and serve use; `ragsync index promote` moves it to another index of the
-- family and `ragsync index rollback` moves it back to previous. An alias
-- may carry the name of an index (the one a user started with): the alias
-- wins when a command resolves index:.
CREATE TABLE aliases (
    name        text PRIMARY KEY,
    index_name  text NOT NULL REFERENCES indexes (name),
    -- Dropping the previous index only loses the way back, not the alias.
    previous    text REFERENCES indexes (name) ON DELETE SET NULL,
    switched_at timestamptz
);

-- state: building (reindex still filling it), caught-up (complete and
-- dual-written by serve), retired (was live, still dual-written until it is
-- dropped so that a rollback loses nothing). "live" is derived: the target
-- of an alias, or the configured index when no alias names it.
-- follows: the alias or index name whose changes serve also writes here;
-- NULL for a plain index. dual_write_since: when a serve first wrote a change
-- to this index beside its primary; reindex waits for it before its second
-- pass (docs/reindex.md).
ALTER TABLE indexes
    ADD COLUMN state text NOT NULL DEFAULT 'caught-up'
        CHECK (state IN ('building', 'caught-up', 'retired')),
    ADD COLUMN follows text,
    ADD COLUMN dual_write_since timestamptz;

-- +goose Down
-- The per-alias views (sink.Promote) depend on chunks and documents.
-- +goose StatementBegin
DO $$
DECLARE a text;
BEGIN
    FOR a IN SELECT name FROM aliases LOOP
        EXECUTE format('DROP VIEW IF EXISTS %I', a || '_chunks');
    END LOOP;
END
$$;
-- +goose StatementEnd
ALTER TABLE indexes DROP COLUMN dual_write_since, DROP COLUMN follows, DROP COLUMN state;
DROP TABLE aliases;
