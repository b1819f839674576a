-- +goose Up

-- Which publication each replication slot streams, by source database,
-- recorded at every start of the Postgres source. A slot does not say which
-- publication its consumer asks for (that is an option of each
-- START_REPLICATION), so `ragsync slot drop` reads these records, in every
-- ragsync schema it can see, to tell whether another deployment's slot still
-- streams from a publication before it drops it.
CREATE TABLE source_streams (
    database    text NOT NULL,
    slot        text NOT NULL,
    publication text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (database, slot)
);

-- +goose Down
DROP TABLE source_streams;
