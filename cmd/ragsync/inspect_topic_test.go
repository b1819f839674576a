package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// A small Debezium envelope as the Avro converter writes it: a row with a
// date column (io.debezium.time.Date, days since the epoch).
const inspectAvroValue = `{"type":"record","name":"Envelope","namespace":"dbserver1.public.tasks","fields":[
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

// inspect --topic reads a topic as it is, decoding registry-framed records
// through the registry (naming the schema each was written with) and JSON
// ones as always; an unreachable registry is an error that names the
// setting, not a line per record.
func TestInspectTopicThroughRegistry(t *testing.T) {
	const topic = "dbserver1.public.tasks"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	reg := srtest.New(t, srtest.Options{})
	id := reg.Register(topic+"-value", "AVRO", inspectAvroValue)
	schema, err := avro.ParseWithCache(inspectAvroValue, "", &avro.SchemaCache{})
	require.NoError(t, err)
	body, err := avro.Marshal(schema, map[string]any{
		"op": "c", "ts_ms": int64(1700000000000),
		// hamba names a union's record branch by its full name.
		"after":  map[string]any{"dbserver1.public.tasks.Value": map[string]any{"id": 7, "due": 19000}},
		"source": map[string]any{"connector": "postgresql", "name": "dbserver1", "ts_ms": int64(1700000000000), "db": "app", "schema": "public", "table": "tasks", "lsn": int64(1000)},
	})
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.ProduceSync(t.Context(),
		&kgo.Record{Key: []byte(`{"id":7}`), Value: srtest.Frame(id, body)},
		&kgo.Record{Key: []byte(`{"id":8}`), Value: []byte(`{"op":"c","after":{"id":8},"source":{"connector":"postgresql","schema":"public","table":"tasks","lsn":1010}}`)},
	).FirstErr())
	brokers := strings.Join(c.ListenAddrs(), ",")

	out, err := runCLI(t, "", "inspect", "--brokers", brokers, "--registry", reg.URL(), "--topic", topic)
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	var first struct {
		DocKey string         `json:"doc_key"`
		After  map[string]any `json:"after"`
		Schema inspectSchema  `json:"schema"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.Equal(t, "7", first.DocKey)
	require.Equal(t, "2022-01-08", first.After["due"], "the date decodes as from JSON with schemas")
	require.Equal(t, inspectSchema{ID: id, Type: "AVRO", Subject: topic + "-value", Version: 1}, first.Schema)
	require.Contains(t, lines[1], `"doc_key":"8"`)
	require.NotContains(t, lines[1], `"schema"`, "a JSON record prints as it always has")

	out, err = runCLI(t, "", "inspect", "--brokers", brokers, "--topic", topic, "--max", "1")
	require.ErrorContains(t, err, "1 message(s) failed to decode")
	require.Contains(t, out, "set source.kafka.registry.url", "without a registry the error names the setting")

	reg.SetDown(true)
	_, err = runCLI(t, "", "inspect", "--brokers", brokers, "--registry", reg.URL(), "--topic", topic)
	require.ErrorContains(t, err, "check --registry or source.kafka.registry")

	_, err = runCLI(t, "", "inspect", "--brokers", brokers, "--topic", "no.such.topic")
	require.ErrorContains(t, err, "no.such.topic")
}

// A topic written in transactions (Debezium's exactly-once delivery) ends
// with a commit marker no consumer sees: inspect --topic still ends, with
// every record printed, instead of waiting for the marker's offset forever.
func TestInspectTopicEndsAfterATransactionMarker(t *testing.T) {
	const topic = "dbserver1.public.notes"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("inspect-test"))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(t.Context(),
		&kgo.Record{Key: []byte(`{"id":1}`), Value: []byte(`{"op":"c","after":{"id":1},"source":{"connector":"postgresql","schema":"public","table":"notes","lsn":1000}}`)},
	).FirstErr())
	require.NoError(t, cl.EndTransaction(t.Context(), kgo.TryCommit))
	old := inspectIdle
	inspectIdle = 500 * time.Millisecond
	t.Cleanup(func() { inspectIdle = old })

	done := make(chan struct{})
	var out string
	go func() {
		defer close(done)
		out, err = runCLI(t, "", "inspect", "--brokers", strings.Join(c.ListenAddrs(), ","), "--topic", topic)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("inspect --topic did not end at the transaction's commit marker")
	}
	require.NoError(t, err, out)
	require.Contains(t, out, `"doc_key":"1"`)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1)
}
