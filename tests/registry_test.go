package tests

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// The Avro schemas Debezium's Avro converter registers for public.articles
// (Connect → Avro as Confluent's AvroData maps it): the key, and the
// envelope's value, whose row gains a nullable column with a default in v2 —
// the evolution a table's ALTER TABLE … ADD COLUMN gives.
const (
	articlesKeySchema = `{"type":"record","name":"Key","namespace":"dbserver1.public.articles","fields":[
	  {"name":"id","type":"int"}],"connect.name":"dbserver1.public.articles.Key"}`
	articlesValueSchema = `{"type":"record","name":"Envelope","namespace":"dbserver1.public.articles","fields":[
	  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
	    {"name":"id","type":"int"},
	    {"name":"title","type":["null","string"],"default":null},
	    {"name":"body","type":["null","string"],"default":null},
	    {"name":"tenant","type":["null","string"],"default":null},
	    {"name":"tags","type":["null",{"type":"array","items":["null","string"]}],"default":null}%s
	  ],"connect.name":"dbserver1.public.articles.Value"}],"default":null},
	  {"name":"after","type":["null","Value"],"default":null},
	  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
	    {"name":"version","type":"string"},
	    {"name":"connector","type":"string"},
	    {"name":"name","type":"string"},
	    {"name":"ts_ms","type":"long"},
	    {"name":"snapshot","type":[{"type":"string","connect.version":1,"connect.parameters":{"allowed":"true,last,false,incremental"},"connect.default":"false","connect.name":"io.debezium.data.Enum"},"null"],"default":"false"},
	    {"name":"db","type":"string"},
	    {"name":"schema","type":"string"},
	    {"name":"table","type":"string"},
	    {"name":"txId","type":["null","long"],"default":null},
	    {"name":"lsn","type":["null","long"],"default":null}
	  ],"connect.name":"io.debezium.connector.postgresql.Source"}},
	  {"name":"op","type":"string"},
	  {"name":"ts_ms","type":["null","long"],"default":null}
	],"connect.name":"dbserver1.public.articles.Envelope"}`
	articlesV2Column = `,
	    {"name":"category","type":["null","string"],"default":null}`
)

// avroTopic is the test registry with the articles schemas registered as
// Debezium's converter registers them (subjects <topic>-key, <topic>-value).
type avroTopic struct {
	reg            *srtest.Server
	keyID          int
	valueID        [2]int // v1, v2
	key, value, v2 avro.Schema
	// api encodes one schema version each: hamba's codec cache knows a
	// named reference ("after": ["null","Value"]) by its name, so one API
	// encoding both versions would write v2's rows with v1's fields.
	api [2]avro.API
}

func newAvroTopic(t *testing.T) *avroTopic {
	t.Helper()
	a := &avroTopic{reg: srtest.New(t, srtest.Options{})}
	a.keyID = a.reg.Register(faultTopic+"-key", "AVRO", articlesKeySchema)
	a.valueID[0] = a.reg.Register(faultTopic+"-value", "AVRO", fmt.Sprintf(articlesValueSchema, ""))
	a.valueID[1] = a.reg.Register(faultTopic+"-value", "AVRO", fmt.Sprintf(articlesValueSchema, articlesV2Column))
	// Each version is parsed with a cache of its own: both name their row
	// "Value", and hamba's shared cache would resolve v2's reference to it
	// with v1's definition.
	parse := func(text string) avro.Schema {
		s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
		require.NoError(t, err)
		return s
	}
	a.key = parse(articlesKeySchema)
	a.value = parse(fmt.Sprintf(articlesValueSchema, ""))
	a.v2 = parse(fmt.Sprintf(articlesValueSchema, articlesV2Column))
	a.api = [2]avro.API{avro.Config{}.Freeze(), avro.Config{}.Freeze()}
	return a
}

// records encodes events as the Avro converter would: events from v2From on
// with the second value schema (a category column the index ignores), so a
// topic carries both versions, as after an ALTER TABLE.
func (a *avroTopic) records(t *testing.T, events []article, v2From int) []*kgo.Record {
	t.Helper()
	out := make([]*kgo.Record, len(events))
	for i, ev := range events {
		k, err := avro.Marshal(a.key, map[string]any{"id": ev.id})
		require.NoError(t, err)
		schema, id, api := a.value, a.valueID[0], a.api[0]
		if i >= v2From {
			schema, id, api = a.v2, a.valueID[1], a.api[1]
		}
		src := map[string]any{"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1700000000000 + ev.lsn,
			"snapshot": "false", "db": "app", "schema": "public", "table": "articles", "txId": 500 + ev.lsn, "lsn": ev.lsn}
		env := map[string]any{"op": ev.op, "source": src, "ts_ms": 1700000000000 + ev.lsn, "before": nil, "after": nil}
		if ev.op == "d" {
			// hamba names a union's record branch by its full name.
			env["before"] = map[string]any{"dbserver1.public.articles.Value": map[string]any{"id": ev.id}}
		} else {
			row := map[string]any{"id": ev.id, "title": ev.title, "body": ev.body, "tenant": ev.tenant, "tags": []any{"t"}}
			if i >= v2From {
				row["category"] = "docs"
			}
			env["after"] = map[string]any{"dbserver1.public.articles.Value": row}
		}
		v, err := api.Marshal(schema, env)
		require.NoError(t, err, "event %d", i)
		out[i] = &kgo.Record{Key: srtest.Frame(a.keyID, k), Value: srtest.Frame(id, v)}
	}
	return out
}

// source is the config's source section: the Kafka world's, with the registry.
func (a *avroTopic) source(w *kafkaWorld, group string) string {
	return w.source(group) + fmt.Sprintf("    registry:\n      url: %s\n", a.reg.URL())
}

// An Avro topic, with records of two schema versions, under SIGKILLs and a
// rebalance (a member joins, one leaves) ends equal to a clean JSON run of
// the same changes, with nothing dead-lettered: the converters decode to the
// same changes, and the registry changes nothing of the delivery guarantees.
func TestAvroTopicKillsAndRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("Avro kill test: long; skipped under -short")
	}
	t.Parallel() // own schemas, clusters, groups and registry
	events := faultHistory(21, 150, 2000)
	want := cleanRunIndex(t, events)

	a := newAvroTopic(t)
	w := newKafkaWorld(t, 3)
	w.produce(t, a.records(t, events, len(events)/2))
	e := newEnv(t, "")
	writeConfigSource(t, e, a.source(w, "avro"))
	total := w.lagOf(t, "avro")
	for kills := 0; kills < 3; kills++ {
		before := w.lagOf(t, "avro")
		p := e.startServe(fmt.Sprintf("serve-%d", kills))
		// Kill once this member has committed about a tenth of the rest.
		target := before - total/10
		for i := 0; i < 1200 && w.lagOf(t, "avro") > target && !p.exited(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		require.Positive(t, w.lagOf(t, "avro"), "the backlog drained before kill %d; the scenario needs more events", kills)
		kill(t, p)
	}
	b := e.startServe("serve-b")
	c := e.startServe("serve-c")
	waitLagBelow(t, w, "avro", total/2) // c leaves with much left: a quarter drained between two polls on a quick machine
	require.Positive(t, w.lagOf(t, "avro"), "the backlog drained before c could leave")
	stopServe(t, c) // leaves mid-stream: its partitions move to b
	w.waitCaughtUp(t, "avro", 4*time.Minute, b)
	stopServe(t, b)
	require.Zero(t, w.dlqCount(t), "no dead letters")
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
	require.LessOrEqual(t, a.reg.RequestsTo("/schemas/ids/"+fmt.Sprint(a.valueID[1])), 12,
		"each process fetches a schema once, not per record")
}

// A registry outage in the middle of a drain stalls the source, dead-letters
// nothing, and the drain goes on when the registry is back; records of a
// schema version first seen during the outage (a column added) decode
// without a restart.
func TestAvroRegistryOutageMidDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("Avro outage test: needs Postgres; skipped under -short")
	}
	t.Parallel() // own schemas, cluster, group and registry
	events := faultHistory(22, 60, 600)
	want := cleanRunIndex(t, events)

	a := newAvroTopic(t)
	w := newKafkaWorld(t, 3)
	recs := a.records(t, events, 300)
	w.produce(t, recs[:300]) // the first half, all of schema v1
	e := newEnv(t, "")
	writeConfigSource(t, e, a.source(w, "outage"))
	p := e.startServe("serve")
	w.waitCaughtUp(t, "outage", 2*time.Minute, p)

	a.reg.SetDown(true)
	w.produce(t, recs[300:]) // schema v2, which serve has not fetched yet
	require.Eventually(t, func() bool { return logHas(t, e, "serve", "schema registry unavailable") }, time.Minute, 100*time.Millisecond,
		"serve says it waits for the registry")
	time.Sleep(2 * time.Second) // several retries
	require.Equal(t, int64(300), w.lagOf(t, "outage"), "nothing of v2 is applied or committed while the registry is down")
	require.Zero(t, w.dlqCount(t), "nothing is dead-lettered for an outage")
	require.False(t, p.exited())

	a.reg.SetDown(false)
	w.waitCaughtUp(t, "outage", 2*time.Minute, p)
	require.True(t, logHas(t, e, "serve", "schema registry answers again"))
	stopServe(t, p)
	require.Zero(t, w.dlqCount(t))
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}

// A framed record whose schema id the registry does not hold is
// dead-lettered with the id, and the records after it are applied.
func TestAvroUnknownSchemaIDIsDeadLettered(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres; skipped under -short")
	}
	t.Parallel()
	a := newAvroTopic(t)
	w := newKafkaWorld(t, 1)
	recs := a.records(t, []article{
		{op: "c", id: 1, lsn: 100, title: "Glaciers", body: body(glacier...), tenant: "acme"},
		{op: "c", id: 2, lsn: 110, title: "Rivers", body: "Rivers carve valleys over long ages.", tenant: "acme"},
	}, 2)
	bad := append([]byte(nil), recs[0].Value...)
	binary.BigEndian.PutUint32(bad[1:5], 4242)
	w.produce(t, []*kgo.Record{{Key: recs[0].Key, Value: bad}, recs[1]})
	e := newEnv(t, "")
	writeConfigSource(t, e, a.source(w, "unknown"))
	p := e.startServe("serve")
	w.waitCaughtUp(t, "unknown", time.Minute, p)
	stopServe(t, p)
	require.Equal(t, int64(1), w.dlqCount(t))
	out, err := e.run(false, "dlq", "list")
	require.NoError(t, err)
	require.Contains(t, out, "4242", "the dead letter names the schema id")
	state := strings.Join(snapshotIndex(t, e.schema), "\n")
	require.Contains(t, state, "doc public.articles/2 ")
	require.NotContains(t, state, "doc public.articles/1 ")
}

// logHas reports whether the log of the serve process started as name holds s.
func logHas(t *testing.T, e *env, name, s string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, name+".log"))
	return err == nil && strings.Contains(string(b), s)
}
