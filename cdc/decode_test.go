package cdc

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the decoder's output")

type decodeCase struct {
	name    string
	file    string // testdata/<file>.json is the value, <file>.key.json the key if present
	value   string // inline value when file is empty
	key     string // inline key, overrides the key file
	topic   string
	headers []Header
	tables  []TableConfig

	wantOp      Op
	wantTable   string
	wantDocKey  string
	wantKind    string
	wantSkip    string // SkipError.Reason
	wantErr     string // DecodeError.Reason
	wantNoAfter bool   // After must be nil (a MongoDB patch)
}

// message builds the Record of a case from its fixture files.
func (tc decodeCase) message(t *testing.T) Record {
	t.Helper()
	m := Record{Raw: Raw{Topic: tc.topic, Partition: 3, Offset: 1042, Headers: tc.headers}}
	if m.Topic == "" {
		m.Topic = "dbserver1.public.articles"
	}
	if tc.file != "" {
		v, err := os.ReadFile(filepath.Join("testdata", tc.file+".json"))
		require.NoError(t, err)
		m.Value = v
		if k, err := os.ReadFile(filepath.Join("testdata", tc.file+".key.json")); err == nil {
			m.Key = k
		}
	} else if tc.value != "" {
		m.Value = []byte(tc.value)
	}
	if tc.key != "" {
		m.Key = []byte(tc.key)
	}
	return m
}

// result is what a golden file holds: exactly one of the three.
type result struct {
	Change *Change `json:"change,omitempty"`
	Skip   string  `json:"skip,omitempty"`
	Error  string  `json:"error,omitempty"`
}

func TestDecode(t *testing.T) {
	t.Parallel()
	cases := []decodeCase{
		// PostgreSQL
		{name: "pg_create_logical_types", file: "pg-create-logical-types", wantOp: OpCreate, wantTable: "public.articles", wantDocKey: "42", wantKind: KindPostgres},
		{name: "pg_update_toast", file: "pg-update-toast", wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "7", wantKind: KindPostgres},
		{name: "pg_delete", file: "pg-delete", wantOp: OpDelete, wantTable: "public.articles", wantDocKey: "7", wantKind: KindPostgres},
		{name: "pg_delete_id_from_before", file: "pg-delete", key: "null", tables: []TableConfig{{Match: "public.articles", ID: []string{"id"}}}, wantOp: OpDelete, wantTable: "public.articles", wantDocKey: "7", wantKind: KindPostgres},
		{name: "pg_truncate", file: "pg-truncate", wantOp: OpTruncate, wantTable: "public.articles", wantKind: KindPostgres},
		{name: "pg_message", file: "pg-message", wantOp: OpMessage, wantTable: "public.articles", wantKind: KindPostgres},
		{name: "pg_read_snapshot_strings", file: "pg-read-snapshot-last", wantOp: OpRead, wantTable: "public.articles", wantDocKey: "101", wantKind: KindPostgres},
		{name: "pg_transaction_block_ts_fallback", file: "pg-create-transaction-block", topic: "dbserver1.public.pairs", tables: []TableConfig{{Match: "*", ID: []string{"pk"}}}, wantOp: OpCreate, wantTable: "public.pairs", wantDocKey: "2", wantKind: KindTS},
		{name: "traceparent_header", file: "pg-update-toast", headers: []Header{{Key: "other", Value: []byte("x")}, {Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}, wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "7", wantKind: KindPostgres},
		// MySQL, SQL Server, Oracle, others
		{name: "mysql_update_composite_key", file: "mysql-update-composite", wantOp: OpUpdate, wantTable: "wiki.pages", wantDocKey: "acme/a%2Fb%25c", wantKind: KindMySQL},
		{name: "mysql_update_configured_id", file: "mysql-update-composite", tables: []TableConfig{{Match: "wiki.*", ID: []string{"slug", "tenant"}}}, wantOp: OpUpdate, wantTable: "wiki.pages", wantDocKey: "a%2Fb%25c/acme", wantKind: KindMySQL},
		{name: "mysql_read_legacy_source", file: "mysql-read-legacy", wantOp: OpRead, wantTable: "inventory.customers", wantDocKey: "1004", wantKind: KindMySQL},
		{name: "sqlserver_update", file: "sqlserver-update", topic: "server1.testDB.dbo.customers", wantOp: OpUpdate, wantTable: "dbo.customers", wantDocKey: "1005", wantKind: KindSQLServer},
		{name: "oracle_create", file: "oracle-create", wantOp: OpCreate, wantTable: "INVENTORY.CUSTOMERS", wantDocKey: "1004", wantKind: KindOracle},
		{name: "ts_fallback_other_connector", file: "ts-fallback-db2", wantOp: OpCreate, wantTable: "DB2INST1.CUSTOMERS", wantDocKey: "9", wantKind: KindTS},
		// MongoDB
		{name: "mongo_create_extended_json", file: "mongo-create-ext", wantOp: OpCreate, wantTable: "inventory.articles", wantDocKey: "596e275826f08b2730779e1f", wantKind: KindMongo},
		{name: "mongo_create_configured_id", file: "mongo-create-ext", key: "null", tables: []TableConfig{{Match: "inventory.articles", ID: []string{"_id"}}}, wantOp: OpCreate, wantTable: "inventory.articles", wantDocKey: "596e275826f08b2730779e1f", wantKind: KindMongo},
		{name: "mongo_update_set_patch", file: "mongo-update-patch-set", wantOp: OpUpdate, wantTable: "inventory.customers", wantDocKey: "1004", wantKind: KindMongo, wantNoAfter: true},
		{name: "mongo_update_replace_patch", file: "mongo-update-replace", tables: []TableConfig{{Match: "*", ID: []string{"_id"}}}, wantOp: OpUpdate, wantTable: "inventory.customers", wantDocKey: "1004", wantKind: KindMongo},
		{name: "mongo_delete_filter", file: "mongo-delete-filter", tables: []TableConfig{{Match: "*", ID: []string{"_id"}}}, wantOp: OpDelete, wantTable: "inventory.customers", wantDocKey: "1004", wantKind: KindMongo},
		{name: "configured_id_absent_everywhere", file: "mongo-delete-filter", key: `{"id":"{\"$oid\" : \"596e275826f08b2730779e1f\"}"}`, tables: []TableConfig{{Match: "*", ID: []string{"title"}}}, wantErr: reasonNoKey},
		{name: "mongo_id_from_key_for_underscore_id", value: `{"op":"d","before":null,"after":null,"source":{"connector":"mongodb","db":"inventory","collection":"customers","ts_ms":1558965509000,"ord":2}}`, key: `{"id":"{\"$oid\" : \"596e275826f08b2730779e1f\"}"}`, tables: []TableConfig{{Match: "*", ID: []string{"_id"}}}, wantOp: OpDelete, wantTable: "inventory.customers", wantDocKey: "596e275826f08b2730779e1f", wantKind: KindMongo},
		// ExtractNewRecordState
		{name: "unwrap_delete_rewrite", file: "unwrap-delete-rewrite", topic: "dbserver1.public.articles", wantOp: OpDelete, wantTable: "public.articles", wantDocKey: "5", wantKind: KindPostgres},
		{name: "unwrap_add_fields_strings", file: "unwrap-add-fields", topic: "server.public.MY_TABLE", wantOp: OpCreate, wantTable: "public.MY_TABLE", wantDocKey: "1", wantKind: KindPostgres},
		{name: "unwrap_table_without_topic", file: "unwrap-add-fields", topic: "flat", wantOp: OpCreate, wantTable: "MY_TABLE", wantDocKey: "1", wantKind: KindPostgres},
		{name: "unwrap_with_schema", file: "unwrap-with-schema", wantOp: OpUpdate, wantTable: "shop.items", wantDocKey: "3", wantKind: KindMySQL},
		{name: "unwrap_deleted_bool", value: `{"id":9,"__deleted":true,"__source_ts_ms":1700000000000}`, key: `{"id":9}`, wantOp: OpDelete, wantTable: "public.articles", wantDocKey: "9", wantKind: KindTS},
		{name: "unwrap_no_op_is_upsert", value: `{"id":9,"title":"t","__source_ts_ms":1700000000000}`, key: `{"id":9}`, wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "9", wantKind: KindTS},
		{name: "unwrap_without_version", value: `{"id":9,"title":"t"}`, key: `{"id":9}`, wantErr: reasonNoVersion},
		{name: "unwrap_bad_deleted", value: `{"id":9,"__deleted":"maybe","__source_ts_ms":1}`, key: `{"id":9}`, wantErr: reasonBadField},
		{name: "unwrap_bad_op", value: `{"id":9,"__op":"x","__source_ts_ms":1}`, key: `{"id":9}`, wantErr: reasonUnknownOp},
		// Skips
		{name: "tombstone_nil", wantSkip: SkipTombstone},
		{name: "tombstone_null", value: " null\n", wantSkip: SkipTombstone},
		{name: "tombstone_envelope", value: `{"schema":null,"payload":null}`, wantSkip: SkipTombstone},
		{name: "transaction_begin", file: "transaction-begin", topic: "dbserver1.transaction", wantSkip: SkipTransaction},
		{name: "schema_change", file: "schema-change", topic: "dbserver1", wantSkip: SkipSchemaChange},
		{name: "heartbeat_schema", file: "heartbeat", wantSkip: SkipHeartbeat},
		{name: "heartbeat_topic", value: `{"ts_ms":1588252618953}`, topic: "__debezium-heartbeat.dbserver1", wantSkip: SkipHeartbeat},
		{name: "flattened_status_column_is_a_row", value: `{"id":"1","status":"END","__source_ts_ms":1}`, key: `{"id":"1"}`, wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "1", wantKind: KindTS},
		{name: "flattened_row_with_source_column", value: `{"id":"1","source":"rss","__source_ts_ms":1}`, key: `{"id":"1"}`, wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "1", wantKind: KindTS},
		{name: "flattened_row_with_source_object", value: `{"id":"1","source":{"feed":"rss"},"__source_ts_ms":1}`, key: `{"id":"1"}`, wantOp: OpUpdate, wantTable: "public.articles", wantDocKey: "1", wantKind: KindTS},
		{name: "envelope_without_op_source_only", value: `{"source":{"connector":"postgresql","lsn":1},"after":{"id":1}}`, key: `{"id":1}`, wantErr: reasonNoOp},
		// Malformed input
		{name: "not_json", value: `{"op":`, wantErr: reasonNotJSON},
		{name: "trailing_data", value: `{"a":1} {"b":2}`, wantErr: reasonNotJSON},
		{name: "not_object", value: `[1,2]`, wantErr: reasonNotObject},
		{name: "payload_not_object", value: `{"schema":{},"payload":"x"}`, wantErr: reasonPayload},
		{name: "too_deep", value: strings.Repeat("[", 200) + strings.Repeat("]", 200), wantErr: reasonTooDeep},
		{name: "envelope_without_op", value: `{"before":null,"after":{"id":1},"source":{"lsn":1}}`, key: `{"id":1}`, wantErr: reasonNoOp},
		{name: "unknown_op", value: `{"op":"x","after":{"id":1},"source":{"lsn":1}}`, key: `{"id":1}`, wantErr: reasonUnknownOp},
		{name: "op_not_string", value: `{"op":1,"after":{"id":1},"source":{"lsn":1}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "source_not_object", value: `{"op":"c","after":{"id":1},"source":[]}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "bad_lsn", value: `{"op":"c","after":{"id":1},"source":{"connector":"postgresql","schema":"s","table":"t","lsn":"abc"}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "negative_lsn", value: `{"op":"c","after":{"id":1},"source":{"connector":"postgresql","schema":"s","table":"t","lsn":-5}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "bad_snapshot", value: `{"op":"c","after":{"id":1},"source":{"schema":"s","table":"t","lsn":5,"snapshot":7}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "bad_binlog_file", value: `{"op":"c","after":{"id":1},"source":{"connector":"mysql","db":"d","table":"t","file":"binlog","pos":5}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "bad_commit_lsn", value: `{"op":"c","after":{"id":1},"source":{"connector":"sqlserver","schema":"s","table":"t","commit_lsn":"zz:1"}}`, key: `{"id":1}`, wantErr: reasonBadField},
		{name: "no_version", value: `{"op":"c","after":{"id":1},"source":{"schema":"s","table":"t"}}`, key: `{"id":1}`, wantErr: reasonNoVersion},
		{name: "no_table", value: `{"op":"c","after":{"id":1},"source":{"lsn":5}}`, topic: "single", key: `{"id":1}`, wantErr: reasonNoTable},
		{name: "no_key", file: "pg-update-toast", key: "null", wantErr: reasonNoKey},
		{name: "configured_id_missing", file: "pg-update-toast", key: "null", tables: []TableConfig{{Match: "public.articles", ID: []string{"slug"}}}, wantErr: reasonNoKey},
		{name: "key_not_json", file: "pg-update-toast", key: "7", wantErr: reasonBadKey},
		{name: "key_not_object_text", file: "pg-update-toast", key: "abc", wantErr: reasonBadKey},
		{name: "create_without_after", value: `{"op":"c","after":null,"source":{"lsn":5,"schema":"s","table":"t"}}`, key: `{"id":1}`, wantErr: reasonNoRow},
		{name: "update_without_after_not_mongo", value: `{"op":"u","before":{"id":1},"after":null,"source":{"lsn":5,"schema":"s","table":"t"}}`, key: `{"id":1}`, wantErr: reasonNoRow},
		{name: "after_not_object", value: `{"op":"c","after":5,"source":{"lsn":5,"schema":"s","table":"t"}}`, key: `{"id":1}`, wantErr: reasonBadRow},
		{name: "after_string_not_json", value: `{"op":"c","after":"{nope","source":{"connector":"mongodb","db":"d","collection":"c","ord":1,"ts_ms":1}}`, key: `{"id":1}`, wantErr: reasonBadRow},
		{name: "bad_decimal", value: `{"schema":{"type":"struct","name":"x.Envelope","fields":[{"field":"after","type":"struct","fields":[{"field":"p","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}]}]},"payload":{"op":"c","after":{"id":1,"p":"!!"},"source":{"lsn":5,"schema":"s","table":"t"}}}`, key: `{"id":1}`, wantErr: reasonBadValue},
		{name: "bad_json_column", value: `{"schema":{"type":"struct","name":"x.Envelope","fields":[{"field":"after","type":"struct","fields":[{"field":"j","type":"string","name":"io.debezium.data.Json"}]}]},"payload":{"op":"c","after":{"id":1,"j":"{"},"source":{"lsn":5,"schema":"s","table":"t"}}}`, key: `{"id":1}`, wantErr: reasonBadValue},
		{name: "bad_date_type", value: `{"schema":{"type":"struct","name":"x.Envelope","fields":[{"field":"after","type":"struct","fields":[{"field":"d","type":"int32","name":"io.debezium.time.Date"}]}]},"payload":{"op":"c","after":{"id":1,"d":true},"source":{"lsn":5,"schema":"s","table":"t"}}}`, key: `{"id":1}`, wantErr: reasonBadValue},
	}
	d := func(tc decodeCase) *Decoder { return NewDecoder(DecoderConfig{Tables: tc.tables}) }
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := tc.message(t)
			ch, err := d(tc).Decode(m)

			var res result
			var skip *SkipError
			var de *DecodeError
			switch {
			case tc.wantSkip != "":
				require.ErrorAs(t, err, &skip)
				require.ErrorIs(t, err, ErrSkip)
				require.Equal(t, tc.wantSkip, skip.Reason)
				res.Skip = skip.Reason
			case tc.wantErr != "":
				require.ErrorAs(t, err, &de)
				require.Equal(t, tc.wantErr, de.Reason, "error: %v", err)
				require.Equal(t, Coord{Topic: m.Topic, Partition: 3, Offset: 1042}, de.Coord)
				require.True(t, de.Permanent())
				require.False(t, errors.Is(err, ErrSkip))
				require.Contains(t, err.Error(), m.Topic+"/3@1042")
				res.Error = err.Error()
			default:
				require.NoError(t, err)
				require.Equal(t, tc.wantOp, ch.Op)
				require.Equal(t, tc.wantTable, ch.Table)
				require.Equal(t, tc.wantDocKey, ch.DocKey)
				require.Equal(t, tc.wantKind, ch.Version.Kind)
				require.Equal(t, Coord{Topic: m.Topic, Partition: 3, Offset: 1042}, ch.Coord)
				if tc.wantNoAfter {
					require.Nil(t, ch.After)
				}
				if ch.Op != OpTruncate && ch.Op != OpMessage {
					require.NotEmpty(t, ch.Key)
				}
				res.Change = &ch
			}
			golden(t, tc.name, res)
		})
	}
}

// golden compares v, as indented JSON, with testdata/<name>.golden.
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	got = append(got, '\n')
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./cdc -run TestDecode -update")
	require.Equal(t, string(want), string(got))
}
