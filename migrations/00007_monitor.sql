-- +goose Up

-- The monitor's state. Nothing on the write path reads these
-- tables; the monitor writes them from its own goroutine.

-- Canary probes: fixed texts embedded when the monitor first meets an index,
-- re-embedded every monitor.interval to see whether the model behind the
-- configured name still answers the same. Keyed by the text's hash so a user
-- who edits monitor.canaries keeps the baselines of the texts that stayed.
CREATE TABLE monitor_canaries (
    index_name text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    text_hash  text NOT NULL,
    text       text NOT NULL,
    embedding  vector NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, text_hash)
);

-- The last measurement of each sampled chunk: its stored vector against a
-- fresh embedding of its text. `ragsync repair` re-embeds the rows past the
-- bound whose chunk still has the content hash that was measured.
CREATE TABLE monitor_samples (
    index_name      text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    chunk_id        bigint NOT NULL,
    content_hash    text NOT NULL,
    kind            text NOT NULL,             -- reused | cached | uniform
    cosine_distance double precision NOT NULL,
    l2              double precision NOT NULL,
    past_bound      boolean NOT NULL,
    measured_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (index_name, chunk_id)
);

CREATE INDEX monitor_samples_past_idx ON monitor_samples (index_name) WHERE past_bound;

-- Drift windows: a reference (the first N chunk vectors, or a pinned
-- sample) and the current sliding window, as bounded reservoirs of slots so
-- that a restart continues where it stopped.
CREATE TABLE monitor_windows (
    index_name    text NOT NULL REFERENCES indexes (name) ON DELETE CASCADE,
    name          text NOT NULL,               -- reference | current
    seen          bigint NOT NULL DEFAULT 0,   -- vectors offered to the window
    last_chunk_id bigint NOT NULL DEFAULT 0,   -- chunks read up to this id
    pinned_at     timestamptz,
    PRIMARY KEY (index_name, name)
);

CREATE TABLE monitor_window_vectors (
    index_name text NOT NULL,
    name       text NOT NULL,
    slot       int  NOT NULL,
    embedding  vector NOT NULL,
    PRIMARY KEY (index_name, name, slot),
    FOREIGN KEY (index_name, name) REFERENCES monitor_windows (index_name, name) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE monitor_window_vectors;
DROP TABLE monitor_windows;
DROP TABLE monitor_samples;
DROP TABLE monitor_canaries;
