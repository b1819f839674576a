// Package backlog builds the synthetic Debezium backlog that the backlog
// and monitor benchmarks drain (and the words the throughput corpus is made
// of): documents created, then updated in turn,
// from paragraphs of made-up words, so each benchmark measures ragsync on
// the same load.
package backlog

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// vocabulary has 512 made-up words (8 onsets × 8 vowels × 8 codas), so that
// paragraphs drawn from it are distinct. An earlier generator cycled through
// 23 words and produced only 23 distinct paragraphs: tens of thousands of
// identical vectors, which HNSW is not built for (each insert explores the
// whole cluster of equal neighbours) and which made the benchmark measure
// that pathology instead of ragsync.
var vocabulary = func() []string {
	onsets, vowels, codas := []string{"b", "d", "k", "l", "m", "r", "s", "t"}, []string{"a", "e", "i", "o", "u", "ai", "ou", "ea"}, []string{"n", "r", "s", "th", "l", "m", "x", "nd"}
	var ws []string
	for _, o := range onsets {
		for _, v := range vowels {
			for _, c := range codas {
				ws = append(ws, o+v+c)
			}
		}
	}
	return ws
}()

// Para is a 25-word paragraph determined by seed.
func Para(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ws := make([]string, 25)
	for k := range ws {
		ws[k] = Word(rng)
	}
	return strings.Join(ws, " ") + "."
}

// Word is one of the made-up words, chosen by rng: text drawn from them
// has the variety HNSW needs (see vocabulary).
func Word(rng *rand.Rand) string { return vocabulary[rng.IntN(len(vocabulary))] }

// Event is the i-th change of a backlog over docs documents (table
// public.articles, key {"id":n}): each document is created, then updated in
// turn, each update replacing the middle one of its three paragraphs.
// Positions (lsn) grow with i.
func Event(i, docs int) *kgo.Record {
	c := change(i, docs)
	v, _ := json.Marshal(map[string]any{
		"op": c.op, "ts_ms": c.ts,
		"before": nil,
		"after":  map[string]any{"id": c.id, "title": c.title, "body": c.body},
		"source": map[string]any{"connector": "postgresql", "db": "app", "schema": "public", "table": "articles",
			"lsn": c.lsn, "txId": c.lsn, "ts_ms": c.ts},
	})
	return &kgo.Record{Key: fmt.Appendf(nil, `{"id":%d}`, c.id), Value: v}
}

// event is one change of the backlog, whatever its encoding.
type event struct {
	id          int
	op          string
	lsn, ts     int64
	title, body string
}

func change(i, docs int) event {
	id := i % docs
	round := i / docs
	op := "c"
	if round > 0 {
		op = "u"
	}
	lsn := int64(1000 + i)
	body := Para(uint64(3*id)) + "\n\n" + Para(uint64(3*(id+round*docs)+1)) + "\n\n" + Para(uint64(3*id+2))
	return event{id: id, op: op, lsn: lsn, ts: 1700000000000 + lsn, title: fmt.Sprintf("Doc %d", id), body: body}
}

// The backlog's key and value schemas as Debezium's Avro converter
// registers them (Connect → Avro as Confluent's AvroData maps it), with the
// fields Event's JSON carries, so both encodings decode to the same change.
const (
	avroKeySchema = `{"type":"record","name":"Key","namespace":"dbserver1.public.articles",
  "fields":[{"name":"id","type":"int"}],"connect.name":"dbserver1.public.articles.Key"}`
	avroValueSchema = `{"type":"record","name":"Envelope","namespace":"dbserver1.public.articles","fields":[
  {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
    {"name":"id","type":"int"},
    {"name":"title","type":["null","string"],"default":null},
    {"name":"body","type":["null","string"],"default":null}
  ],"connect.name":"dbserver1.public.articles.Value"}],"default":null},
  {"name":"after","type":["null","Value"],"default":null},
  {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
    {"name":"connector","type":"string"},
    {"name":"db","type":"string"},
    {"name":"schema","type":"string"},
    {"name":"table","type":"string"},
    {"name":"lsn","type":["null","long"],"default":null},
    {"name":"txId","type":["null","long"],"default":null},
    {"name":"ts_ms","type":"long"}
  ],"connect.name":"io.debezium.connector.postgresql.Source"}},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}
],"connect.name":"dbserver1.public.articles.Envelope"}`
)

// Avro encodes the backlog's changes as Debezium's Avro converter does,
// framed for a schema registry.
type Avro struct {
	api            avro.API
	key, value     avro.Schema
	keyID, valueID int
}

// NewAvro registers the backlog's schemas with register (subject, schema
// type, schema text → id), under the subjects the converter uses for topic.
func NewAvro(topic string, register func(subject, typ, text string) int) (*Avro, error) {
	a := &Avro{api: avro.Config{}.Freeze()}
	var err error
	if a.key, err = avro.ParseWithCache(avroKeySchema, "", &avro.SchemaCache{}); err != nil {
		return nil, err
	}
	if a.value, err = avro.ParseWithCache(avroValueSchema, "", &avro.SchemaCache{}); err != nil {
		return nil, err
	}
	a.keyID = register(topic+"-key", "AVRO", avroKeySchema)
	a.valueID = register(topic+"-value", "AVRO", avroValueSchema)
	return a, nil
}

// Event is Event(i, docs) in Avro.
func (a *Avro) Event(i, docs int) (*kgo.Record, error) {
	c := change(i, docs)
	k, err := a.api.Marshal(a.key, map[string]any{"id": c.id})
	if err != nil {
		return nil, err
	}
	v, err := a.api.Marshal(a.value, map[string]any{
		"op": c.op, "ts_ms": c.ts, "before": nil,
		// hamba names a union's record branch by its full name.
		"after": map[string]any{"dbserver1.public.articles.Value": map[string]any{"id": c.id, "title": c.title, "body": c.body}},
		"source": map[string]any{"connector": "postgresql", "db": "app", "schema": "public", "table": "articles",
			"lsn": c.lsn, "txId": c.lsn, "ts_ms": c.ts},
	})
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: frame(a.keyID, k), Value: frame(a.valueID, v)}, nil
}

// frame puts body in the registry's wire format: byte 0, the schema id.
func frame(id int, body []byte) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, body...)
}
