-- +goose Up

-- Document ids are injective: two (table, key) pairs never share an id. Existing ids are rewritten where
-- the new encoding differs, so a running index keeps its documents instead
-- of re-creating them under new ids beside the old rows.

-- Chunks follow their document's id when it is rewritten (here, and by any
-- later id fix), instead of blocking the update.
ALTER TABLE chunks
    DROP CONSTRAINT chunks_index_name_doc_id_fkey,
    ADD CONSTRAINT chunks_index_name_doc_id_fkey FOREIGN KEY (index_name, doc_id)
        REFERENCES documents (index_name, id) ON UPDATE CASCADE ON DELETE CASCADE;

-- cdc.TableName: '%' and '/' are percent-escaped in both parts of
-- "namespace.table" (and '.' in the namespace). A stored name with several
-- dots was ambiguous; it is read the way the new encoding reads it (the
-- first dot ends the namespace, true of every MongoDB name), so only names
-- holding '%' or '/' change. A rewrite that would land on an existing id is
-- skipped: that document is re-created by its next change.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.ragsync_table_name(t text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN strpos(t, '.') = 0
        THEN replace(replace(t, '%', '%25'), '/', '%2F')
        ELSE replace(replace(split_part(t, '.', 1), '%', '%25'), '/', '%2F') || '.' ||
             replace(replace(substr(t, strpos(t, '.') + 1), '%', '%25'), '/', '%2F')
    END
$$;
-- +goose StatementEnd

UPDATE documents d
SET source_table = n.t, id = n.t || '/' || d.doc_key
FROM (SELECT index_name, id, pg_temp.ragsync_table_name(source_table) AS t
      FROM documents WHERE source_table ~ '[%/]') n
WHERE d.index_name = n.index_name AND d.id = n.id
  AND NOT EXISTS (SELECT 1 FROM documents o WHERE o.index_name = d.index_name AND o.id = n.t || '/' || d.doc_key);

UPDATE truncations tr
SET source_table = pg_temp.ragsync_table_name(tr.source_table)
WHERE tr.source_table ~ '[%/]'
  AND NOT EXISTS (SELECT 1 FROM truncations o WHERE o.index_name = tr.index_name
                  AND o.source_table = pg_temp.ragsync_table_name(tr.source_table));

-- MongoDB ids keep their type: a string _id that reads like a number,
-- true/false/null or JSON is now written quoted (cdc's mongoKeyText). The
-- stored row still says the _id was a string. A 24-hex string cannot be
-- told from an ObjectId here (both are strings in the row) and is left.
UPDATE documents d
SET doc_key = q.k, id = d.source_table || '/' || q.k
FROM (SELECT index_name, id, '"' || replace(replace(doc_key, '\', '\\'), '"', '\"') || '"' AS k
      FROM documents
      WHERE version LIKE 'mongo:%' AND jsonb_typeof(row -> '_id') = 'string' AND doc_key = row ->> '_id'
        AND (doc_key ~ '^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$'
             OR doc_key IN ('true', 'false', 'null') OR doc_key ~ '^["{\[]')) q
WHERE d.index_name = q.index_name AND d.id = q.id
  AND NOT EXISTS (SELECT 1 FROM documents o WHERE o.index_name = d.index_name AND o.id = d.source_table || '/' || q.k);

DROP FUNCTION pg_temp.ragsync_table_name(text);

-- +goose Down
-- Rewritten ids stay: the old encoding could not hold them apart.
ALTER TABLE chunks
    DROP CONSTRAINT chunks_index_name_doc_id_fkey,
    ADD CONSTRAINT chunks_index_name_doc_id_fkey FOREIGN KEY (index_name, doc_id)
        REFERENCES documents (index_name, id) ON DELETE CASCADE;
