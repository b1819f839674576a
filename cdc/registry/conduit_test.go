package registry_test

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/conduitio/conduit-commons/database/inmemory"
	schemaregistry "github.com/conduitio/conduit-schema-registry"
	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry"
)

// The change of a Debezium PostgreSQL row as the Avro converter writes it,
// in two versions: v2 adds a column with a default.
const (
	conduitV1 = `{"type":"record","name":"Envelope","namespace":"dbserver1.public.tasks","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"id","type":"int"},
    {"name":"due","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null}
  ]}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
    {"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},
    {"name":"db","type":"string"},{"name":"schema","type":"string"},{"name":"table","type":"string"},
    {"name":"lsn","type":["null","long"],"default":null}]}},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}
],"connect.name":"dbserver1.public.tasks.Envelope"}`
	conduitKey = `{"type":"record","name":"Key","namespace":"dbserver1.public.tasks","fields":[{"name":"id","type":"int"}],"connect.name":"dbserver1.public.tasks.Key"}`
)

// Against a registry this project did not write — Conduit's schema
// registry, an independent implementation of the Confluent REST API,
// installed from the Go module proxy and run in process — schemas are
// registered through the API as a converter registers them, and records of
// two versions decode without a restart. Conduit's registry does not serve
// GET /schemas/ids/{id}/subjects, so this also checks that a registry
// missing an optional call still decodes (the subject comes from another
// call or is "unknown"), and that an id it does not hold is permanent.
func TestAgainstConduitSchemaRegistry(t *testing.T) {
	srv := startConduit(t)
	ctx := context.Background()
	admin, err := sr.NewClient(sr.URLs(srv.URL))
	require.NoError(t, err)
	key, err := admin.CreateSchema(ctx, "dbserver1.public.tasks-key", sr.Schema{Schema: conduitKey, Type: sr.TypeAvro})
	require.NoError(t, err)
	val, err := admin.CreateSchema(ctx, "dbserver1.public.tasks-value", sr.Schema{Schema: conduitV1, Type: sr.TypeAvro})
	require.NoError(t, err)

	reg, err := registry.New(registry.Config{URL: srv.URL})
	require.NoError(t, err)
	dec := cdc.NewDecoder(cdc.DecoderConfig{Schemas: reg})
	ch, err := dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.tasks",
		Key:   encode(t, conduitKey, key.ID, map[string]any{"id": 7}),
		Value: encode(t, conduitV1, val.ID, task(7, 19000))}})
	require.NoError(t, err)
	require.Equal(t, "7", ch.DocKey)
	require.Equal(t, "public.tasks", ch.Table)
	require.Equal(t, "2022-01-08", ch.After["due"])

	// v2 adds a column; its first record is decoded by the same client.
	v2 := strings.Replace(conduitV1, `"default":null}
  ]}]`, `"default":null},
    {"name":"note","type":["null","string"],"default":null}
  ]}]`, 1)
	require.NotEqual(t, conduitV1, v2)
	val2, err := admin.CreateSchema(ctx, "dbserver1.public.tasks-value", sr.Schema{Schema: v2, Type: sr.TypeAvro})
	require.NoError(t, err)
	require.NotEqual(t, val.ID, val2.ID)
	row := task(8, 19001)
	row["after"].(map[string]any)["dbserver1.public.tasks.Value"].(map[string]any)["note"] = "hello"
	ch, err = dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.tasks",
		Key: encode(t, conduitKey, key.ID, map[string]any{"id": 8}), Value: encode(t, v2, val2.ID, row)}})
	require.NoError(t, err)
	require.Equal(t, "hello", ch.After["note"])
	require.Equal(t, "2022-01-09", ch.After["due"])

	s, err := reg.Describe(ctx, val.ID)
	require.NoError(t, err)
	require.Equal(t, "AVRO", s.Type)

	_, err = dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.tasks", Key: encode(t, conduitKey, key.ID, map[string]any{"id": 7}),
		Value: encode(t, conduitV1, 999, task(7, 19000))}})
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de, "an id the registry does not hold is permanent")
	require.ErrorContains(t, err, "999")
}

func task(id, due int) map[string]any {
	return map[string]any{
		"op": "c", "ts_ms": int64(1700000000000),
		"after":  map[string]any{"dbserver1.public.tasks.Value": map[string]any{"id": id, "due": due}},
		"source": map[string]any{"connector": "postgresql", "name": "dbserver1", "ts_ms": int64(1700000000000), "db": "app", "schema": "public", "table": "tasks", "lsn": int64(1000)},
	}
}

// encode writes v with the Avro schema text, framed with id.
func encode(t *testing.T, text string, id int, v any) []byte {
	t.Helper()
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	require.NoError(t, err)
	body, err := avro.Config{}.Freeze().Marshal(s, v)
	require.NoError(t, err)
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}

// startConduit runs Conduit's schema registry, backed by memory, over HTTP.
func startConduit(t *testing.T) *httptest.Server {
	t.Helper()
	r, err := schemaregistry.NewSchemaRegistry(&inmemory.DB{})
	require.NoError(t, err)
	mux := http.NewServeMux()
	schemaregistry.NewServer(nil, r).RegisterHandlers(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
