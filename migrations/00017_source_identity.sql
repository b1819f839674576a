-- +goose Up

-- The identity of the database a slot's loads read (cdc.PostgresSource:
-- "pg:<system identifier>/<database>"), so that a start against a moved
-- server (a dump/restore, an upgrade, another server) is noticed instead of
-- streaming positions that say nothing about the stored ones; NULL on rows
-- written before it was kept, filled at the next start while the slot
-- exists. succeeds: the identities this one replaced by adopted moves,
-- whose documents a load reconciles as its own.
ALTER TABLE source_loads
    ADD COLUMN source_id text,
    ADD COLUMN succeeds  text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE source_loads DROP COLUMN source_id, DROP COLUMN succeeds;
