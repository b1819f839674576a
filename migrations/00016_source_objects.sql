-- +goose Up

-- What the Postgres source's initial loads covered, by slot: the tables
-- whose load finished (loaded_tables; NULL on rows written before it was
-- recorded, which covered every table then published), and the tables of a
-- load in progress, in the order Postgres listed them when it began
-- (pending_tables), so a resumed load skips by position, never by comparing
-- names in another collation. fenced: the load in progress reads one
-- snapshot from its start.
ALTER TABLE source_loads
    ADD COLUMN loaded_tables  text[],
    ADD COLUMN pending_tables text[],
    ADD COLUMN fenced         boolean NOT NULL DEFAULT false;

-- Replication slots and publications ragsync created in a source database:
-- `ragsync slot drop` drops only these (unless --force), and a publication
-- ragsync created may be altered when tables[] gains a table.
CREATE TABLE source_objects (
    kind       text NOT NULL CHECK (kind IN ('slot', 'publication')),
    database   text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, database, name)
);

-- +goose Down
DROP TABLE source_objects;
ALTER TABLE source_loads DROP COLUMN loaded_tables, DROP COLUMN pending_tables, DROP COLUMN fenced;
