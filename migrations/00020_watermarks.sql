-- +goose Up

-- The watermark of each index, per source and lane: every change of the
-- lane at or before position is searchable (its rows and vectors
-- committed), and so is every change committed at or before through_at.
-- A pipeline writes a lane's row after acknowledging it, in a transaction
-- of its own that also notifies ragsync_watermark, so an application can
-- check its own write in SQL and a waiting reader wakes at once.
--
-- kind is the position's kind: lsn (a Postgres WAL position, castable to
-- pg_lsn), offset (Kafka: lane is topic/partition), line (a JSON Lines
-- file), entry (a Redis Stream: lane is the stream). ord orders a lane's
-- positions as a number. A lane never moves back: a write of an older
-- position (a replica that lost the partition, a replay) changes nothing.
CREATE TABLE watermarks (
    index_name   text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    source       text NOT NULL,
    lane         text NOT NULL,
    kind         text NOT NULL,
    position     text NOT NULL,
    ord          numeric NOT NULL,
    -- The source commit time of the newest change at or before position.
    committed_at timestamptz,
    -- Every change of the lane committed at or before it is searchable, as
    -- far as the source can tell.
    through_at   timestamptz,
    -- Nothing of the lane was pending when the row was written.
    caught_up    boolean NOT NULL DEFAULT false,
    -- The process that wrote the row (host and pid).
    writer       text NOT NULL DEFAULT '',
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, source, lane)
);

-- One row per index and source: its time watermark (the oldest lane's),
-- its age, and its position when it has one lane (a Postgres slot, a
-- file).
CREATE VIEW watermark AS
SELECT index_name, source, kind,
       count(*)::int AS lanes,
       CASE WHEN count(*) = 1 THEN min(position) END AS position,
       min(through_at) AS through_at,
       max(committed_at) AS committed_at,
       now() - min(through_at) AS age,
       bool_and(caught_up) AS caught_up,
       max(updated_at) AS updated_at
FROM watermarks
GROUP BY index_name, source, kind;

-- +goose Down
DROP VIEW watermark;
DROP TABLE watermarks;
