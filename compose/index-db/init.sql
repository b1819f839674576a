-- The index store. ragsync's migrations create their own schema; the vector
-- extension lives in public so every schema's search_path can see it.
CREATE EXTENSION IF NOT EXISTS vector;
