package pgrepl_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// docParityColumns are the columns of the table TestOneDocumentForOneRow
// reads, with their Postgres types and the Connect schema Debezium's
// PostgreSQL connector gives them (defaults: decimal.handling.mode=precise,
// time.precision.mode=adaptive, binary.handling.mode=bytes; "Data type
// mappings" of its documentation).
var docParityColumns = []struct {
	name, pgType string
	schema       map[string]any
}{
	{"id", "int PRIMARY KEY", map[string]any{"type": "int32"}},
	{"title", "text", map[string]any{"type": "string", "optional": true}},
	{"amount", "numeric(12,3)", map[string]any{"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal", "parameters": map[string]any{"scale": "3", "connect.decimal.precision": "12"}}},
	{"neg", "numeric", map[string]any{"type": "struct", "optional": true, "name": "io.debezium.data.VariableScaleDecimal", "fields": []any{
		map[string]any{"field": "scale", "type": "int32"}, map[string]any{"field": "value", "type": "bytes"}}}},
	{"nan", "numeric", map[string]any{"type": "struct", "optional": true, "name": "io.debezium.data.VariableScaleDecimal", "fields": []any{
		map[string]any{"field": "scale", "type": "int32"}, map[string]any{"field": "value", "type": "bytes"}}}},
	{"ts", "timestamp", map[string]any{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp"}},
	{"tstz", "timestamptz", map[string]any{"type": "string", "optional": true, "name": "io.debezium.time.ZonedTimestamp"}},
	{"d", "date", map[string]any{"type": "int32", "optional": true, "name": "io.debezium.time.Date"}},
	{"tm", "time", map[string]any{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTime"}},
	{"doc", "jsonb", map[string]any{"type": "string", "optional": true, "name": "io.debezium.data.Json"}},
	{"j", "json", map[string]any{"type": "string", "optional": true, "name": "io.debezium.data.Json"}},
	{"tags", "text[]", map[string]any{"type": "array", "optional": true, "items": map[string]any{"type": "string", "optional": true}}},
	{"nums", "int[]", map[string]any{"type": "array", "optional": true, "items": map[string]any{"type": "int32", "optional": true}}},
	{"tss", "timestamp[]", map[string]any{"type": "array", "optional": true, "items": map[string]any{"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp"}}},
	{"raw", "bytea", map[string]any{"type": "bytes", "optional": true}},
	{"uid", "uuid", map[string]any{"type": "string", "optional": true, "name": "io.debezium.data.Uuid"}},
	{"flag", "bool", map[string]any{"type": "boolean", "optional": true}},
	{"big", "bigint", map[string]any{"type": "int64", "optional": true}},
	{"f", "float8", map[string]any{"type": "double", "optional": true}},
	{"whole", "float8", map[string]any{"type": "double", "optional": true}},
	{"tiny", "float4", map[string]any{"type": "float", "optional": true}},
	{"nothing", "text", map[string]any{"type": "string", "optional": true}},
}

// docParityRow is one row: its SQL literals, and the after image Debezium
// writes for it (numbers as the JSON text the Jackson converter writes).
type docParityRow struct {
	sql      map[string]string
	debezium map[string]any
}

func docParityRows() []docParityRow {
	micros := func(s string) json.Number {
		ts, err := time.Parse("2006-01-02 15:04:05.999999", s)
		if err != nil {
			panic(err)
		}
		return json.Number(fmt.Sprint(ts.UnixMicro()))
	}
	days := func(s string) json.Number {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			panic(err)
		}
		return json.Number(fmt.Sprint(d.Unix() / 86400))
	}
	// unscaled is Connect's Decimal bytes: big-endian two's complement.
	unscaled := func(n int64) string {
		b := big.NewInt(n).Bytes()
		if n >= 0 {
			if len(b) == 0 || b[0]&0x80 != 0 {
				b = append([]byte{0}, b...)
			}
		} else {
			// Two's complement in the fewest bytes that hold n.
			l := 1
			for ; l < 9; l++ {
				if n >= -(int64(1) << (8*l - 1)) {
					break
				}
			}
			m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*l)), big.NewInt(n))
			b = m.Bytes()
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	variable := func(scale int, n int64) map[string]any {
		return map[string]any{"scale": scale, "value": unscaled(n)}
	}
	return []docParityRow{
		{
			sql: map[string]string{
				"id": "1", "title": `'Crème brûlée — 東京 🍮 "quoted"'`, "amount": "12345.678", "neg": "-5", "nan": "'NaN'",
				"ts": "'2024-03-05 06:07:08.123456'", "tstz": "'2024-03-05 07:07:08.5+01'", "d": "'2024-03-05'", "tm": "'12:34:56.789'",
				"doc": `'{"b": null, "a": [1, 2.5], "c": "é"}'`, "j": `'{"k": [true, 1.0], "e": "ü"}'`,
				"tags": `ARRAY['x','y z','a,b',NULL,'q"uote','ß']`, "nums": "'{1,-2,3}'", "tss": "ARRAY['2024-01-01 01:02:03', NULL]::timestamp[]",
				"raw": `'\x00ff10'`, "uid": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "flag": "true", "big": "9007199254740993",
				"f": "1.5", "whole": "20", "tiny": "0.1", "nothing": "NULL",
			},
			debezium: map[string]any{
				"id": json.Number("1"), "title": `Crème brûlée — 東京 🍮 "quoted"`, "amount": unscaled(12345678), "neg": variable(0, -5), "nan": nil,
				"ts": micros("2024-03-05 06:07:08.123456"), "tstz": "2024-03-05T06:07:08.5Z", "d": days("2024-03-05"), "tm": json.Number("45296789000"),
				"doc": `{"a": [1, 2.5], "b": null, "c": "é"}`, "j": `{"k": [true, 1.0], "e": "ü"}`,
				"tags": []any{"x", "y z", "a,b", nil, `q"uote`, "ß"}, "nums": []any{json.Number("1"), json.Number("-2"), json.Number("3")},
				"tss": []any{micros("2024-01-01 01:02:03"), nil},
				"raw": "AP8Q", "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "flag": true, "big": json.Number("9007199254740993"),
				"f": json.Number("1.5"), "whole": json.Number("20.0"), "tiny": json.Number("0.1"), "nothing": nil,
			},
		},
		{
			// Everything null but the key and the title.
			sql:      map[string]string{"id": "2", "title": "'plain'"},
			debezium: map[string]any{"id": json.Number("2"), "title": "plain"},
		},
		{
			sql: map[string]string{
				"id": "3", "title": "'Ünïcödé ﬁ'", "amount": "0.5", "neg": "0.001", "nan": "-12.50",
				"ts": "'1969-12-31 23:59:59.5'", "tstz": "'2024-06-01 00:00:00+05:30'", "d": "'1960-01-01'", "tm": "'00:00:00'",
				"doc": `'[]'`, "j": `'"str"'`, "tags": "'{}'", "nums": "'{}'", "tss": "'{}'",
				"raw": `'\x'`, "uid": "'00000000-0000-0000-0000-000000000000'", "flag": "false", "big": "-1",
				"f": "1e20", "whole": "0.00001", "tiny": "1e6", "nothing": "''",
			},
			debezium: map[string]any{
				"id": json.Number("3"), "title": "Ünïcödé ﬁ", "amount": unscaled(500), "neg": variable(3, 1), "nan": variable(2, -1250),
				"ts": micros("1969-12-31 23:59:59.5"), "tstz": "2024-05-31T18:30:00Z", "d": days("1960-01-01"), "tm": json.Number("0"),
				"doc": `[]`, "j": `"str"`, "tags": []any{}, "nums": []any{}, "tss": []any{},
				"raw": "", "uid": "00000000-0000-0000-0000-000000000000", "flag": false, "big": json.Number("-1"),
				"f": json.Number("1.0E20"), "whole": json.Number("1.0E-5"), "tiny": json.Number("1000000.0"), "nothing": "",
			},
		},
	}
}

// docParityEvent is the Debezium event (schemas enabled) of row r of table
// schema.parity.
func docParityEvent(t *testing.T, schema, op string, r docParityRow) cdc.Record {
	t.Helper()
	fields := make([]any, 0, len(docParityColumns))
	after := map[string]any{}
	for _, c := range docParityColumns {
		f := map[string]any{"field": c.name}
		for k, v := range c.schema {
			f[k] = v
		}
		fields = append(fields, f)
		after[c.name] = r.debezium[c.name] // absent: null
	}
	ev := map[string]any{
		"schema": map[string]any{"type": "struct", "name": "dbserver1." + schema + ".parity.Envelope", "fields": []any{
			map[string]any{"field": "before", "type": "struct", "optional": true, "fields": fields},
			map[string]any{"field": "after", "type": "struct", "optional": true, "fields": fields},
			map[string]any{"field": "source", "type": "struct", "fields": []any{}},
			map[string]any{"field": "op", "type": "string"},
			map[string]any{"field": "ts_ms", "type": "int64", "optional": true},
		}},
		"payload": map[string]any{
			"before": nil, "after": after, "op": op, "ts_ms": 1709618828100,
			"source": map[string]any{"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1709618828000,
				"snapshot": "false", "db": "test", "schema": schema, "table": "parity", "txId": 777, "lsn": 24023128},
		},
	}
	v, err := json.Marshal(ev)
	require.NoError(t, err)
	return cdc.Record{Raw: cdc.Raw{Topic: "dbserver1." + schema + ".parity", Key: fmt.Appendf(nil, `{"id":%s}`, r.debezium["id"]), Value: v}}
}

// recordingSink keeps every document the pipeline writes, by key.
type recordingSink struct {
	*sink.Store
	mu   sync.Mutex
	docs map[string]sink.Document
}

func (r *recordingSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	r.mu.Lock()
	r.docs[d.Key] = d
	r.mu.Unlock()
	return r.Store.Upsert(ctx, d)
}

type parityEmbedder struct{}

func (parityEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, s := range texts {
		out[i] = []float32{float32(len(s)%7) + 1, 1, 1, 1}
	}
	return out, nil
}

func (e parityEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

type messagesSource struct{ msgs []cdc.Record }

func (s *messagesSource) Fetch(context.Context) (cdc.Batch, error) {
	if s.msgs == nil {
		return cdc.Batch{}, io.EOF
	}
	// Debezium JSON is decoded as the Kafka and file sources hand it over.
	b := cdc.Batch{Records: cdc.DecodeAll(cdc.NewDecoder(cdc.DecoderConfig{}), s.msgs), Ack: func(context.Context) error { return nil }}
	s.msgs = nil
	return b, nil
}

// documents runs msgs through a pipeline into index (its own, in pool's
// schema) and renders each document it wrote, by key, as the bytes that
// must not depend on the transport: its chunks' text, metadata, tenant and
// stored row.
func documents(t *testing.T, pool *pgtestPool, index string, tables []pipeline.TableConfig, msgs []cdc.Record) map[string]string {
	t.Helper()
	st, err := sink.OpenIndex(t.Context(), pool.pool, sink.Config{Mode: sink.Write, Create: true, Schema: pool.schema, Index: index, Model: "test", Dimensions: 4})
	require.NoError(t, err)
	rec := &recordingSink{Store: st, docs: map[string]sink.Document{}}
	ch, err := chunker.New(chunker.Config{TargetTokens: 400, MinTokens: 10, MaxTokens: 800})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Tables: tables, RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: &messagesSource{msgs: msgs}, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: rec, Embedder: parityEmbedder{}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	out := map[string]string{}
	for k, d := range rec.docs {
		texts := make([]string, len(d.Chunks))
		for i, c := range d.Chunks {
			texts[i] = c.Text
		}
		b, err := json.MarshalIndent(map[string]any{"chunks": texts, "metadata": d.Metadata, "tenant": d.Tenant, "row": d.Row}, "", " ")
		require.NoError(t, err)
		out[k] = string(b)
	}
	return out
}

// pgtestPool is the migrated schema the documents are written to.
type pgtestPool struct {
	pool   *pgxpool.Pool
	schema string
}

// TestOneDocumentForOneRow: the same rows, whichever way they reach the
// index (the Postgres source's initial load, its stream, a backfill, or
// Debezium's events of them), become byte-identical documents: the same
// text, metadata and stored row, for every common column type.
func TestOneDocumentForOneRow(t *testing.T) {
	b := pgSetup(t)
	tbl := b.r.Schema + ".parity"
	var cols, names []string
	for _, c := range docParityColumns {
		cols = append(cols, c.name+" "+c.pgType)
		names = append(names, c.name)
	}
	b.r.Exec(t, fmt.Sprintf("CREATE TABLE %s (%s)", tbl, strings.Join(cols, ", ")))
	rows := docParityRows()
	for _, r := range rows {
		vals := make([]string, len(names))
		for i, n := range names {
			vals[i] = "NULL"
			if v, ok := r.sql[n]; ok {
				vals[i] = v
			}
		}
		b.r.Exec(t, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", tbl, strings.Join(names, ", "), strings.Join(vals, ", ")))
	}

	// Every column in the text, one line each, and in the metadata.
	var text strings.Builder
	for _, n := range names {
		fmt.Fprintf(&text, "%s: {{%s}}\n", n, n)
	}
	tables := []pipeline.TableConfig{{Match: tbl, Text: text.String(), Metadata: names, ID: []string{"id"}}}

	// The Postgres source: the initial load reads the rows, then an
	// update that changes nothing streams each again.
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: tbl}}
	cfg.InitialLoad = true
	cfg.DLQPath = t.TempDir() + "/dlq.jsonl"
	cfg.State = pgrepl.NewMemoryState() // the restart below knows the load is done
	s := b.source(t, cfg)
	loadBatch, err := s.Fetch(t.Context())
	require.NoError(t, err)
	require.Len(t, loadBatch.Records, len(rows), "one batch holds the load")
	var loaded []cdc.Change
	for _, m := range loadBatch.Records {
		loaded = append(loaded, *m.Change)
	}
	require.NoError(t, loadBatch.Ack(t.Context()))
	b.r.Exec(t, fmt.Sprintf("UPDATE %s SET id = id", tbl))
	streamed := b.fetch(t, s, len(rows), true)
	s.Close()

	// The re-read of a row by its document id (what a dead letter's
	// replay, or an unchanged TOAST value, reads): the loaded changes,
	// dead-lettered and replayed, come back read again at the next start.
	dl := file.NewDeadLetters(cfg.DLQPath, "test")
	for _, m := range loadBatch.Records {
		require.NoError(t, dl.Put(t.Context(), m, fmt.Errorf("embed: down")))
	}
	n, err := pgrepl.DeadLetterFile(cfg.DLQPath).Replay(t.Context())
	require.NoError(t, err)
	require.Equal(t, len(rows), n)
	reread := b.fetch(t, b.source(t, cfg), len(rows), true)
	asMessages := func(chs []cdc.Change) []cdc.Record {
		out := make([]cdc.Record, len(chs))
		for i := range chs {
			out[i] = cdc.Record{Raw: cdc.Raw{Offset: chs[i].Coord.Offset}, Change: &chs[i]}
		}
		return out
	}

	// The backfill reader.
	bf, err := backfill.Open(t.Context(), backfill.Config{URL: pgtest.URL(), Tables: []backfill.Table{{Name: tbl}}}, nil)
	require.NoError(t, err)
	var backfilled []cdc.Record
	for {
		batch, err := bf.Fetch(t.Context())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		backfilled = append(backfilled, batch.Records...)
	}
	bf.Close()
	require.Len(t, backfilled, len(rows))

	// One row, one change: whichever reader read it, the same document
	// id, key columns and values.
	byKey := func(name string, chs []cdc.Change) map[string]cdc.Change {
		out := map[string]cdc.Change{}
		for _, ch := range chs {
			out[ch.DocKey] = ch
		}
		require.Len(t, out, len(rows), name)
		return out
	}
	var bfChanges []cdc.Change
	for _, m := range backfilled {
		require.NotNil(t, m.Change, "the backfill hands over changes")
		require.Nil(t, m.Value, "not bytes to decode again")
		bfChanges = append(bfChanges, *m.Change)
	}
	byLoad := byKey("initial load", loaded)
	for name, chs := range map[string][]cdc.Change{"backfill": bfChanges, "re-read": reread, "stream": streamed} {
		for k, got := range byKey(name, chs) {
			want, ok := byLoad[k]
			require.True(t, ok, "%s: document %s not loaded", name, k)
			require.Equal(t, want.Table, got.Table, "%s: document %s", name, k)
			require.Equal(t, want.Key, got.Key, "%s: document %s", name, k)
			require.Equal(t, want.After, got.After, "%s: document %s", name, k)
			docKey, key, ok := cdc.RowKey([]string{"id"}, got.After)
			require.True(t, ok)
			require.Equal(t, k, docKey, "%s: the document id is the row's", name)
			require.Equal(t, want.Key, key, name)
		}
	}
	for _, ch := range reread {
		require.Equal(t, cdc.OpUpdate, ch.Op, "the row is read again as it is now")
		require.Equal(t, loaded[0].Version, ch.Version, "at the dead letter's version")
	}

	// Debezium's events of the rows.
	var events []cdc.Record
	for _, r := range rows {
		events = append(events, docParityEvent(t, b.r.Schema, "c", r))
	}

	pool, schema := pgtest.Schema(t)
	pp := &pgtestPool{pool: pool, schema: schema}
	want := documents(t, pp, "debezium", tables, events)
	require.Len(t, want, len(rows))
	for name, msgs := range map[string][]cdc.Record{
		"initial load": asMessages(loaded), "stream": asMessages(streamed), "backfill": backfilled, "reread": asMessages(reread),
	} {
		got := documents(t, pp, strings.ReplaceAll(name, " ", "_"), tables, msgs)
		require.Len(t, got, len(rows), name)
		for k, w := range want {
			require.Equal(t, w, got[k], "document %s: %s differs from Debezium's event", k, name)
		}
	}
	// Spot checks that the common form is the one documented for
	// Debezium's events (cdc.Change).
	require.Contains(t, want["1"], `"ts": "2024-03-05T06:07:08.123456Z"`)
	require.Contains(t, want["1"], `whole: 20\n`)
	require.Contains(t, want["3"], `"tstz": "2024-05-31T18:30:00Z"`)
	require.Contains(t, want["3"], `f: 1e+20\n`)
	require.Contains(t, want["1"], `"tm": "12:34:56.789000"`)
}

func (e parityEmbedder) ReportedModel() string { return "" }
