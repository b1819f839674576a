-- The sample document database that Debezium watches. Runs once, when the
-- source-db volume is first created (docker-entrypoint-initdb.d).

CREATE TABLE public.articles (
    id         serial PRIMARY KEY,
    title      text        NOT NULL,
    body       text        NOT NULL,
    tenant     text        NOT NULL DEFAULT 'acme',
    tags       text[]      NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- FULL makes pgoutput send the whole old row on UPDATE and DELETE, so
-- Debezium's "before" image is complete and an unchanged TOASTed body is still
-- known to ragsync; with DEFAULT, large unchanged text columns arrive as
-- Debezium's unavailable-value placeholder instead (see docs/debezium.md).
ALTER TABLE public.articles REPLICA IDENTITY FULL;

-- Keep updated_at honest on every edit, so it can travel as index metadata.
CREATE FUNCTION public.articles_touch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

CREATE TRIGGER articles_touch BEFORE UPDATE ON public.articles
    FOR EACH ROW EXECUTE FUNCTION public.articles_touch();

INSERT INTO public.articles (title, body, tenant, tags) VALUES
('Storing Winter Squash',
 E'## Curing\n\nLeave squash in a warm, dry place for ten days after harvest so the skin hardens and small cuts seal over.\n\n## Keeping\n\nA cool room at about twelve degrees keeps most varieties for months. Check them weekly and use any with soft spots first.',
 'acme', '{garden,food}'),
('Choosing a Sleeping Bag',
 E'## Temperature ratings\n\nThe comfort rating is the lowest temperature at which an average sleeper stays warm; the limit rating is for survival, not sleep.\n\n## Fill\n\nDown packs small and lasts for years but loses warmth when wet. Synthetic fill is heavier, cheaper and forgiving in damp weather.',
 'globex', '{outdoors,gear}'),
('Sharpening a Kitchen Knife',
 E'## Finding the angle\n\nMost Western kitchen knives are ground at about twenty degrees per side. Hold that angle steady and let the stone do the work.\n\n## Honing\n\nA steel does not remove metal; it straightens a rolled edge between sharpenings, so use it often and the stone rarely.',
 'acme', '{cooking,tools}');

-- Debezium's signal table (signal.data.collection in connect/articles.json):
-- `ragsync backfill --via debezium --signal-table public.debezium_signal`
-- inserts execute-snapshot / stop-snapshot signals here. The connector reads
-- them from the WAL, so the table is in its table.include.list.
CREATE TABLE public.debezium_signal (
    id   varchar(42) PRIMARY KEY,
    type varchar(32) NOT NULL,
    data varchar(2048)
);
