package cdc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// corpusDir is the held-out Debezium corpus (/work/shared/data/debezium):
// real messages copied from Debezium's docs, examples and tests. It is not
// part of the repository, so the test skips without it.
func corpusDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "data", "debezium")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Debezium corpus not present at %s", dir)
	}
	return dir
}

// corpusWant is the expected outcome of decoding one corpus file.
type corpusWant struct {
	id      []string // tables[*].id for this file; nil = message key only
	op      Op
	table   string
	docKey  string
	kind    string
	skip    string
	err     string
	check   func(t *testing.T, ch Change)
	noAfter bool
}

var corpusWants = map[string]corpusWant{
	"mongo-create-docs.json": {op: OpCreate, table: "inventory.customers", docKey: "1004", kind: KindMongo, check: func(t *testing.T, ch Change) {
		require.Equal(t, json.Number("1004"), ch.After["_id"])
		require.False(t, ch.Version.Snapshot)
	}},
	"mongo-delete-docs.json": {id: []string{"_id"}, op: OpDelete, table: "inventory.customers", docKey: "1004", kind: KindMongo, check: func(t *testing.T, ch Change) {
		require.Equal(t, "Anne Marie", ch.Before["first_name"])
		require.True(t, ch.Version.Snapshot)
	}},
	"mongo-delete-oplog-filter.json":        {id: []string{"_id"}, op: OpDelete, table: "inventory.customers", docKey: "1004", kind: KindMongo},
	"mongo-transaction-end.json":            {skip: SkipTransaction},
	"mongo-update-change-streams-docs.json": {id: []string{"_id"}, op: OpUpdate, table: "inventory.customers", docKey: "1004", kind: KindMongo, check: func(t *testing.T, ch Change) { require.Equal(t, "Anne Marie", ch.After["first_name"]) }},
	"mongo-update-oplog-patch.json":         {id: []string{"_id"}, op: OpUpdate, table: "inventory.customers", docKey: "1004", kind: KindMongo, noAfter: true},
	"mysql-create-compact-tutorial.json":    {op: OpCreate, table: "inventory.customers", docKey: "1005", kind: KindMySQL},
	"mysql-create-serde-with-schema.json":   {id: []string{"id"}, op: OpCreate, table: "inventory.customers", docKey: "1004", kind: KindMySQL},
	"mysql-delete-tutorial.json":            {id: []string{"id"}, op: OpDelete, table: "inventory.customers", docKey: "1004", kind: KindMySQL},
	"mysql-read-engine-wasm.json":           {id: []string{"id"}, op: OpRead, table: "inventory.customers", docKey: "1004", kind: KindMySQL, check: func(t *testing.T, ch Change) { require.True(t, ch.Version.Snapshot) }},
	"mysql-read-tutorial.json":              {op: OpRead, table: "inventory.customers", docKey: "1004", kind: KindMySQL},
	"mysql-schema-change-docs.json":         {skip: SkipSchemaChange},
	"mysql-tombstone-tutorial.json":         {skip: SkipTombstone},
	"mysql-transaction-end-docs.json":       {skip: SkipTransaction},
	"mysql-update-engine-wasm.json":         {id: []string{"id"}, op: OpUpdate, table: "inventory.customers", docKey: "1001", kind: KindMySQL},
	"mysql-update-serde.json":               {id: []string{"id"}, op: OpUpdate, table: "inventory.customers", docKey: "1004", kind: KindMySQL},
	"mysql-update-tutorial.json":            {id: []string{"id"}, op: OpUpdate, table: "inventory.customers", docKey: "1004", kind: KindMySQL},
	"oracle-create-docs.json":               {op: OpCreate, table: "corpus.fallback", docKey: "1004", kind: KindOracle, check: func(t *testing.T, ch Change) { require.Equal(t, "6.28.807", ch.TxID) }},
	"oracle-truncate-docs.json":             {op: OpTruncate, table: "DEBEZIUM.TEST_TABLE", kind: KindOracle},
	"pg-create-decimal-base64.json": {op: OpCreate, table: "inventory.orderline", docKey: "1", kind: KindPostgres, check: func(t *testing.T, ch Change) {
		require.Equal(t, "D54=", ch.After["totalprice"], "no schema: values stay as sent")
	}},
	"pg-create-docs.json":                   {id: []string{"id"}, op: OpCreate, table: "public.customers", docKey: "1", kind: KindPostgres, check: func(t *testing.T, ch Change) { require.Equal(t, "555", ch.TxID) }},
	"pg-create-kafka-ssl.json":              {id: []string{"id"}, op: OpCreate, table: "inventory.customers", docKey: "1005", kind: KindPostgres},
	"pg-create-microtimestamp.json":         {id: []string{"id"}, op: OpCreate, table: "inventory.purchaseorder", docKey: "1", kind: KindPostgres},
	"pg-create-with-transaction-block.json": {id: []string{"pk"}, op: OpCreate, table: "corpus.fallback", docKey: "2", kind: KindTS, check: func(t *testing.T, ch Change) { require.Equal(t, "571:53195832", ch.TxID) }},
	"pg-create-zoned-timestamp.json": {id: []string{"id"}, op: OpCreate, table: "public.customers", docKey: "1", kind: KindPostgres, check: func(t *testing.T, ch Change) {
		require.Equal(t, "2011-01-11T16:40:30.123456789+00:00", ch.After["created_at"])
	}},
	"pg-delete-docs.json":                {id: []string{"id"}, op: OpDelete, table: "public.customers", docKey: "1", kind: KindPostgres},
	"pg-message-decoded-after-smt.json":  {id: []string{"id"}, op: OpCreate, table: "corpus.fallback", docKey: "1", kind: KindPostgres},
	"pg-message-decoded.json":            {op: OpMessage, kind: KindPostgres},
	"pg-message-transactional-docs.json": {op: OpMessage, kind: KindPostgres},
	"pg-read-snapshot-payload-only.json": {id: []string{"id"}, op: OpRead, table: "inventory.products", docKey: "101", kind: KindTS, check: func(t *testing.T, ch Change) { require.True(t, ch.Version.Snapshot) }},
	"pg-transaction-begin.json":          {skip: SkipTransaction},
	"pg-transaction-end.json":            {skip: SkipTransaction},
	"pg-truncate-docs.json":              {op: OpTruncate, table: "public.customers", kind: KindPostgres},
	"pg-update-default-docs.json":        {id: []string{"id"}, op: OpUpdate, table: "public.customers", docKey: "1", kind: KindPostgres},
	"pg-update-toast-unavailable.json": {id: []string{"id"}, op: OpUpdate, table: "inventory.customers", docKey: "1004", kind: KindPostgres, check: func(t *testing.T, ch Change) {
		require.Equal(t, []string{"biography"}, ch.Unavailable)
		require.NotContains(t, ch.After, "biography")
	}},
	"pg-update-without-before.json":   {op: OpUpdate, table: "inventory.orderline", docKey: "2", kind: KindPostgres},
	"sqlserver-create-docs.json":      {id: []string{"id"}, op: OpCreate, table: "dbo.customers", docKey: "1005", kind: KindSQLServer},
	"sqlserver-update-docs.json":      {id: []string{"id"}, op: OpUpdate, table: "dbo.customers", docKey: "1005", kind: KindSQLServer},
	"unwrap-add-fields-docs.json":     {err: reasonNoKey}, // the doc elided the row's columns
	"unwrap-delete-rewrite-docs.json": {err: reasonNoVersion},
	"unwrap-plain-serde.json":         {err: reasonNoVersion},
}

// corpusKeyOnly are key files with no value file: checked through parseKey.
var corpusKeyOnly = map[string]string{
	"mongo-objectid.key.json": "596e275826f08b2730779e1f",
}

func TestDecodeCorpus(t *testing.T) {
	t.Parallel()
	dir := corpusDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	seen := 0
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			t.Parallel()
			if strings.HasSuffix(base, ".key.json") {
				valueFile := strings.TrimSuffix(f, ".key.json") + ".json"
				if _, err := os.Stat(valueFile); err == nil {
					return // decoded with its value
				}
				want, ok := corpusKeyOnly[base]
				require.True(t, ok, "new key-only corpus file: add it to corpusKeyOnly")
				k, err := os.ReadFile(f)
				require.NoError(t, err)
				_, kmap, _, err := parseKey(k, true)
				require.NoError(t, err)
				require.Equal(t, want, kmap["id"])
				return
			}
			want, ok := corpusWants[base]
			require.True(t, ok, "new corpus file: add its expected outcome to corpusWants")
			v, err := os.ReadFile(f)
			require.NoError(t, err)
			k, _ := os.ReadFile(strings.TrimSuffix(f, ".json") + ".key.json")
			var cfg DecoderConfig
			if want.id != nil {
				cfg.Tables = []TableConfig{{Match: "*", ID: want.id}}
			}
			m := Record{Raw: Raw{Topic: "dbserver1.corpus.fallback", Partition: 1, Offset: 7, Key: k, Value: v}}
			ch, err := NewDecoder(cfg).Decode(m)
			switch {
			case want.skip != "":
				var skip *SkipError
				require.ErrorAs(t, err, &skip)
				require.Equal(t, want.skip, skip.Reason)
			case want.err != "":
				var de *DecodeError
				require.ErrorAs(t, err, &de)
				require.Equal(t, want.err, de.Reason, "error: %v", err)
				require.Equal(t, Coord{Topic: m.Topic, Partition: 1, Offset: 7}, de.Coord)
			default:
				require.NoError(t, err)
				require.Equal(t, want.op, ch.Op)
				require.Equal(t, want.kind, ch.Version.Kind)
				if want.op != OpMessage {
					require.Equal(t, want.table, ch.Table)
				}
				require.Equal(t, want.docKey, ch.DocKey)
				if want.noAfter {
					require.Nil(t, ch.After)
				}
				if want.check != nil {
					want.check(t, ch)
				}
				_, err := json.Marshal(ch)
				require.NoError(t, err, "a decoded change must always marshal")
			}
		})
		seen++
	}
	require.Equal(t, len(corpusWants)+len(corpusKeyOnly), seen-countKeysWithValues(files))
}

func countKeysWithValues(files []string) int {
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".key.json") {
			if _, err := os.Stat(strings.TrimSuffix(f, ".key.json") + ".json"); err == nil {
				n++
			}
		}
	}
	return n
}
