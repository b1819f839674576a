package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// orderV1 is a row schema as Confluent's AvroConverter registers a
// Debezium row: connect.name on the record, an optional column as a union
// with null first.
const orderV1 = `{"type":"record","name":"Value","namespace":"shop.public.orders",
 "fields":[
  {"name":"id","type":"long"},
  {"name":"note","type":["null","string"],"default":null}
 ],"connect.name":"shop.public.orders.Value"}`

// orderV2 adds a field with a default and removes the optional "note", as
// BACKWARD compatibility allows.
const orderV2 = `{"type":"record","name":"Value","namespace":"shop.public.orders",
 "fields":[
  {"name":"id","type":"long"},
  {"name":"status","type":"string","default":"new"}
 ],"connect.name":"shop.public.orders.Value"}`

// avroBody encodes v with the Avro schema text, with hamba's encoder. Each
// call has its own hamba configuration: hamba caches encoders by a schema
// fingerprint that does not tell two versions of a record apart when a
// union refers to it by name, and would write a v2 row with v1's encoder.
func avroBody(t testing.TB, text string, v any) []byte {
	t.Helper()
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	require.NoError(t, err)
	b, err := avro.Config{}.Freeze().Marshal(s, v)
	require.NoError(t, err)
	return b
}

// setup starts a registry with opts and a client for it with cfg (whose
// URL it fills in).
func setup(t *testing.T, opts srtest.Options, cfg Config) (*Registry, *srtest.Server) {
	t.Helper()
	srv := srtest.New(t, opts)
	cfg.URL = srv.URL()
	reg, err := New(cfg)
	require.NoError(t, err)
	return reg, srv
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // each must appear in the error; none means no error
	}{
		{"ok", Config{URL: "http://127.0.0.1:8081"}, nil},
		{"missing url", Config{}, []string{"source.kafka.registry.url: required"}},
		{"not http", Config{URL: "ftp://x"}, []string{"source.kafka.registry.url", "not an http"}},
		{"basic and bearer", Config{URL: "http://x", Username: "u", Password: "p", BearerToken: "t"}, []string{"source.kafka.registry.bearer_token", "not both"}},
		{"password alone", Config{URL: "http://x", Password: "p"}, []string{"source.kafka.registry.username"}},
		{"cert without key", Config{URL: "https://x", CertFile: "c.pem"}, []string{"cert_file, key_file: set both"}},
		{"negative timeout", Config{URL: "http://x", Timeout: -time.Second}, []string{"source.kafka.registry.timeout"}},
		{"every problem at once", Config{BearerToken: "t", Username: "u", KeyFile: "k"}, []string{"url: required", "bearer_token", "key_file"}},
		{"ca file missing", Config{URL: "https://x", CAFile: filepath.Join(t.TempDir(), "none.pem")}, []string{"source.kafka.registry.ca_file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestDecodeFramedAvro(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	id := srv.Register("shop.public.orders-value", "", orderV1)
	b := srtest.Frame(id, avroBody(t, orderV1, map[string]any{"id": int64(7), "note": map[string]any{"string": "gift"}}))

	v, schema, err := reg.DecodeFramed(t.Context(), "shop.public.orders", false, b)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"id": json.Number("7"), "note": "gift"}, v)
	require.Equal(t, "shop.public.orders.Value", schema["name"])
	require.Equal(t, "struct", schema["type"])
	fields := schema["fields"].([]any)
	require.Equal(t, map[string]any{"type": "int64", "optional": false, "field": "id"}, fields[0])
	require.Equal(t, map[string]any{"type": "string", "optional": true, "field": "note"}, fields[1])

	desc, err := reg.Describe(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, Schema{ID: id, Type: "AVRO", Subject: "shop.public.orders-value", Version: 1, Text: orderV1}, desc)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   srtest.Options
		cfg    Config
		refuse bool
	}{
		{"basic", srtest.Options{Username: "key", Password: "secret"}, Config{Username: "key", Password: "secret"}, false},
		{"bearer", srtest.Options{BearerToken: "tok"}, Config{BearerToken: "tok"}, false},
		{"basic missing", srtest.Options{Username: "key", Password: "secret"}, Config{}, true},
		{"basic wrong", srtest.Options{Username: "key", Password: "secret"}, Config{Username: "key", Password: "nope"}, true},
		{"bearer missing", srtest.Options{BearerToken: "tok"}, Config{}, true},
		{"bearer wrong", srtest.Options{BearerToken: "tok"}, Config{BearerToken: "other"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg, srv := setup(t, tc.opts, tc.cfg)
			id := srv.Register("t-value", "", orderV1)
			b := srtest.Frame(id, avroBody(t, orderV1, map[string]any{"id": int64(1), "note": nil}))
			_, _, err := reg.DecodeFramed(t.Context(), "t", false, b)
			if !tc.refuse {
				require.NoError(t, err)
				return
			}
			// Credentials are configuration: the source stalls, visibly,
			// and never dead-letters the record.
			require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
			require.ErrorContains(t, err, "HTTP 401")
			require.ErrorContains(t, err, "source.kafka.registry.username, password or bearer_token")
		})
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := srtest.New(t, srtest.Options{TLS: true})
	id := srv.Register("t-value", "", orderV1)
	b := srtest.Frame(id, avroBody(t, orderV1, map[string]any{"id": int64(1), "note": nil}))

	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, srv.CAPEM(), 0o600))
	reg, err := New(Config{URL: srv.URL(), CAFile: ca})
	require.NoError(t, err)
	_, _, err = reg.DecodeFramed(t.Context(), "t", false, b)
	require.NoError(t, err)

	// Without the test CA the certificate is unknown: nothing decodes, and
	// nothing is dead-lettered.
	reg, err = New(Config{URL: srv.URL()})
	require.NoError(t, err)
	_, _, err = reg.DecodeFramed(t.Context(), "t", false, b)
	require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "certificate")

	notPEM := filepath.Join(t.TempDir(), "bad.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	_, err = New(Config{URL: srv.URL(), CAFile: notPEM})
	require.ErrorContains(t, err, "source.kafka.registry.ca_file")
	require.ErrorContains(t, err, "no PEM certificate")
}

func TestCacheOneRequestPerID(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	ids := []int{
		srv.Register("a-value", "", orderV1),
		srv.Register("b-value", "", orderV2),
	}
	bodies := [][]byte{
		srtest.Frame(ids[0], avroBody(t, orderV1, map[string]any{"id": int64(1), "note": nil})),
		srtest.Frame(ids[1], avroBody(t, orderV2, map[string]any{"id": int64(2), "status": "paid"})),
	}
	// 1,000 records over 8 goroutines that all start at once, so that
	// many ask for each id before the first answer arrives.
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 1000)
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 125 {
				_, _, err := reg.DecodeFramed(context.Background(), "t", false, bodies[(g+i)%2])
				if err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		p := "/schemas/ids/" + strconv.Itoa(id)
		require.Equal(t, 1, srv.RequestsTo(p), "requests to %s", p)
		require.Equal(t, 1, srv.RequestsTo(p+"/versions"), "requests to %s/versions", p)
	}
	require.Equal(t, 4, srv.Requests())
}

func TestOutageIsTransientAndRecovers(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"503", "dropped connections"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			reg, srv := setup(t, srtest.Options{}, Config{Timeout: 30 * time.Second})
			id := srv.Register("t-value", "", orderV1)
			b := srtest.Frame(id, avroBody(t, orderV1, map[string]any{"id": int64(5), "note": nil}))
			down := func(v bool) {
				if mode == "503" {
					srv.SetDown(v)
				} else {
					srv.SetDropConnections(v)
				}
			}
			down(true)
			for range 3 {
				_, _, err := reg.DecodeFramed(t.Context(), "t", false, b)
				require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
				require.ErrorContains(t, err, "schema id 1")
			}
			// Every attempt asked again: a failure is never cached.
			require.Equal(t, 3, srv.RequestsTo("/schemas/ids/1"))

			down(false)
			v, _, err := reg.DecodeFramed(t.Context(), "t", false, b)
			require.NoError(t, err)
			require.Equal(t, json.Number("5"), v.(map[string]any)["id"])

			// Once compiled, a schema outlives the next outage.
			down(true)
			_, _, err = reg.DecodeFramed(t.Context(), "t", false, b)
			require.NoError(t, err)
		})
	}
}

func TestUnreachableIsTransient(t *testing.T) {
	t.Parallel()
	srv := srtest.New(t, srtest.Options{})
	reg, err := New(Config{URL: "http://127.0.0.1:1", Timeout: 5 * time.Second})
	require.NoError(t, err)
	_, _, err = reg.DecodeFramed(t.Context(), "t", false, srtest.Frame(1, []byte{2}))
	require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.Zero(t, srv.Requests())
}

func TestWrongBasePathStalls(t *testing.T) {
	t.Parallel()
	srv := srtest.New(t, srtest.Options{})
	id := srv.Register("t-value", "", orderV1)
	reg, err := New(Config{URL: srv.URL() + "/nosuch"})
	require.NoError(t, err)
	_, _, err = reg.DecodeFramed(t.Context(), "t", false, srtest.Frame(id, []byte{2, 0}))
	require.ErrorIs(t, err, cdc.ErrRegistryUnavailable, "a wrong URL must not dead-letter every record")
	require.ErrorContains(t, err, "check source.kafka.registry.url")
}

func TestUnknownIDIsPermanent(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	srv.Register("t-value", "", orderV1)
	_, _, err := reg.DecodeFramed(t.Context(), "t", false, srtest.Frame(99, []byte{2}))
	require.Error(t, err)
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "schema id 99 is not in the registry at "+srv.URL())
	require.ErrorContains(t, err, "another registry")

	_, err = reg.Describe(t.Context(), 99)
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "schema id 99 is not in the registry")
}

func TestCorruptBytesArePermanent(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	id := srv.Register("shop.public.orders-value", "", orderV1)
	good := avroBody(t, orderV1, map[string]any{"id": int64(7), "note": map[string]any{"string": "gift"}})
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"truncated", good[:len(good)-2], "ends early"},
		{"trailing bytes", append(append([]byte{}, good...), 0, 0), "bytes left"},
		{"bad union index", []byte{14, 8}, "union index 4"},
		{"string longer than the record", []byte{14, 2, 0xfe, 0xff, 0x03}, "string of"},
		{"invalid UTF-8", []byte{14, 2, 4, 0xff, 0xfe}, "UTF-8"},
		{"empty", nil, "ends early"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := reg.DecodeFramed(t.Context(), "shop.public.orders", false, srtest.Frame(id, tc.body))
			require.Error(t, err)
			require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
			require.ErrorContains(t, err, "schema id 1 (subject shop.public.orders-value version 1)")
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, _, err := reg.DecodeFramed(t.Context(), "t", false, []byte{1, 0, 0, 0, 1, 2})
	require.ErrorContains(t, err, "not in the schema registry's wire format")
}

func TestSubjectUnknown(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	id := srv.Register("t-value", "", orderV1)
	// The schema is served but its subjects are not: the error still
	// names the id, and says the subject is unknown.
	srv.SetFail("/schemas/ids/1/versions", 500)
	_, _, err := reg.DecodeFramed(t.Context(), "t", false, srtest.Frame(id, []byte{14}))
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "schema id 1 (subject unknown)")
}

func TestServerErrorsAreTransient(t *testing.T) {
	t.Parallel()
	for _, status := range []int{429, 500, 502, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			reg, srv := setup(t, srtest.Options{}, Config{})
			id := srv.Register("t-value", "", orderV1)
			srv.SetFail("/schemas/ids/1", status)
			b := srtest.Frame(id, avroBody(t, orderV1, map[string]any{"id": int64(1), "note": nil}))
			_, _, err := reg.DecodeFramed(t.Context(), "t", false, b)
			require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
			require.ErrorContains(t, err, "HTTP "+strconv.Itoa(status))
			srv.SetFail("/schemas/ids/1", 0)
			_, _, err = reg.DecodeFramed(t.Context(), "t", false, b)
			require.NoError(t, err)
		})
	}
}

func TestUnsupportedSchemaIsPermanent(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	rec := srv.Register("t-value", "", `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`)
	_, _, err := reg.DecodeFramed(t.Context(), "t", false, srtest.Frame(rec, []byte{0}))
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "schema id 1 (subject t-value version 1)")
	require.ErrorContains(t, err, "recursive")

	bad := srv.Register("u-value", "", `{"type":"record","name":"R","fields":[{"name":"x","type":"nosuch"}]}`)
	_, _, err = reg.DecodeFramed(t.Context(), "u", false, srtest.Frame(bad, []byte{0}))
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, "subject u-value version 1")
	// A schema that does not compile is asked for once: ids are immutable.
	_, _, _ = reg.DecodeFramed(t.Context(), "u", false, srtest.Frame(bad, []byte{0}))
	require.Equal(t, 1, srv.RequestsTo("/schemas/ids/2"))
}

func TestReferences(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	const money = `{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}`
	const row = `{"type":"record","name":"Row","namespace":"shop","fields":[{"name":"id","type":"int"},{"name":"price","type":"shop.Money"}]}`
	srv.Register("shop.Money", "", money)
	id := srv.Register("t-value", "", row, srtest.Reference{Name: "shop.Money", Subject: "shop.Money", Version: 1})
	// Encode the row alone against a schema text with Money inlined.
	inlined := `{"type":"record","name":"Row","namespace":"shop","fields":[{"name":"id","type":"int"},{"name":"price","type":` + money + `}]}`
	b := srtest.Frame(id, avroBody(t, inlined, map[string]any{"id": 3, "price": map[string]any{"cents": int64(250)}}))
	v, schema, err := reg.DecodeFramed(t.Context(), "t", false, b)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"id": json.Number("3"), "price": map[string]any{"cents": json.Number("250")}}, v)
	require.Equal(t, "shop.Money", schema["fields"].([]any)[1].(map[string]any)["name"])

	missing := srv.Register("m-value", "", row, srtest.Reference{Name: "shop.Money", Subject: "nosuch", Version: 1})
	_, _, err = reg.DecodeFramed(t.Context(), "m", false, srtest.Frame(missing, nil))
	require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.ErrorContains(t, err, `reference "shop.Money" (subject nosuch version 1)`)
}

// TestSchemaEvolution decodes, with one Decoder and no restart, records
// written before and after the row schema gained a field with a default and
// lost an optional one, and before and after the key schema changed.
func TestSchemaEvolution(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	envelope := func(row string) string {
		return `{"type":"record","name":"Envelope","namespace":"shop.public.orders","fields":[
		 {"name":"before","type":["null",` + row + `],"default":null},
		 {"name":"after","type":["null","Value"],"default":null},
		 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
		   {"name":"connector","type":"string"},{"name":"name","type":"string"},{"name":"ts_ms","type":"long"},
		   {"name":"db","type":"string"},{"name":"schema","type":"string"},{"name":"table","type":"string"},
		   {"name":"lsn","type":["null","long"],"default":null}],
		  "connect.name":"io.debezium.connector.postgresql.Source"}},
		 {"name":"op","type":"string"},
		 {"name":"ts_ms","type":["null","long"],"default":null}
		],"connect.name":"shop.public.orders.Envelope"}`
	}
	keyV1 := `{"type":"record","name":"Key","namespace":"shop.public.orders","fields":[{"name":"id","type":"long"}],"connect.name":"shop.public.orders.Key"}`
	keyV2 := `{"type":"record","name":"Key","namespace":"shop.public.orders","fields":[{"name":"region","type":"string"},{"name":"id","type":"long"}],"connect.name":"shop.public.orders.Key"}`
	source := func(lsn int64) map[string]any {
		return map[string]any{"connector": "postgresql", "name": "shop", "ts_ms": int64(1700000000000), "db": "shop",
			"schema": "public", "table": "orders", "lsn": map[string]any{"long": lsn}}
	}
	v1, v2 := envelope(orderV1), envelope(orderV2)
	idV1 := srv.Register("shop.public.orders-value", "", v1)
	idKeyV1 := srv.Register("shop.public.orders-key", "", keyV1)
	dec := cdc.NewDecoder(cdc.DecoderConfig{Schemas: reg})

	m1 := cdc.Record{Raw: cdc.Raw{Topic: "shop.public.orders", Offset: 1,
		Key: srtest.Frame(idKeyV1, avroBody(t, keyV1, map[string]any{"id": int64(7)})),
		Value: srtest.Frame(idV1, avroBody(t, v1, map[string]any{"before": nil, "op": "c", "source": source(100),
			"after": map[string]any{"shop.public.orders.Value": map[string]any{"id": int64(7), "note": map[string]any{"string": "gift"}}},
			"ts_ms": nil}))}}
	ch, err := dec.DecodeContext(t.Context(), m1)
	require.NoError(t, err)
	require.Equal(t, cdc.OpCreate, ch.Op)
	require.Equal(t, "public.orders", ch.Table)
	require.Equal(t, "7", ch.DocKey)
	require.Equal(t, map[string]any{"id": json.Number("7"), "note": "gift"}, ch.After)

	// The connector restarts with the new row and key schemas; the old
	// records are still in the topic and still decode.
	idV2 := srv.Register("shop.public.orders-value", "", v2)
	idKeyV2 := srv.Register("shop.public.orders-key", "", keyV2)
	require.NotEqual(t, idV1, idV2)
	m2 := cdc.Record{Raw: cdc.Raw{Topic: "shop.public.orders", Offset: 2,
		Key: srtest.Frame(idKeyV2, avroBody(t, keyV2, map[string]any{"region": "eu/west", "id": int64(8)})),
		Value: srtest.Frame(idV2, avroBody(t, v2, map[string]any{"before": nil, "op": "u", "source": source(200),
			"after": map[string]any{"shop.public.orders.Value": map[string]any{"id": int64(8), "status": "paid"}},
			"ts_ms": map[string]any{"long": int64(1700000000001)}}))}}
	ch, err = dec.DecodeContext(t.Context(), m2)
	require.NoError(t, err)
	require.Equal(t, cdc.OpUpdate, ch.Op)
	require.Equal(t, "eu%2Fwest/8", ch.DocKey, "the key's fields in the new key schema's order")
	require.Equal(t, map[string]any{"id": json.Number("8"), "status": "paid"}, ch.After)

	ch, err = dec.DecodeContext(t.Context(), m1)
	require.NoError(t, err)
	require.Equal(t, "7", ch.DocKey)
	require.Equal(t, "gift", ch.After["note"])

	// A value the registry cannot decode is a dead letter naming id and
	// subject; an outage is not.
	bad := m2
	bad.Value = srtest.Frame(idV2, []byte{0, 1})
	_, err = dec.DecodeContext(t.Context(), bad)
	var de *cdc.DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, int64(2), de.Coord.Offset)
	require.ErrorContains(t, err, "subject shop.public.orders-value version 2")

	srv.SetDown(true)
	fresh, err := New(Config{URL: srv.URL()})
	require.NoError(t, err)
	_, err = cdc.NewDecoder(cdc.DecoderConfig{Schemas: fresh}).DecodeContext(t.Context(), m2)
	require.ErrorIs(t, err, cdc.ErrRegistryUnavailable)
	require.False(t, errors.As(err, &de), "an outage is never a dead letter")
}

// TestConcurrentDecodes decodes one Avro change from many goroutines: the
// compiled schema and its Connect schema are shared by every record of the
// id, so nothing downstream may write to them (the race detector watches).
func TestConcurrentDecodes(t *testing.T) {
	t.Parallel()
	reg, srv := setup(t, srtest.Options{}, Config{})
	value, err := os.ReadFile(filepath.Join("..", "testdata", "pg-create-logical-types.json"))
	require.NoError(t, err)
	rec := cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.articles", Value: value}}
	want, err := cdc.NewDecoder(cdc.DecoderConfig{Tables: []cdc.TableConfig{{Match: "*", ID: []string{"id"}}}}).Decode(rec)
	require.NoError(t, err)

	var env struct {
		Schema  map[string]any
		Payload any
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&env))
	text, body, err := avroEncode(env.Schema, env.Payload)
	require.NoError(t, err)
	rec.Value = srtest.Frame(srv.Register("dbserver1.public.articles-value", "AVRO", text), body)

	d := cdc.NewDecoder(cdc.DecoderConfig{Tables: []cdc.TableConfig{{Match: "*", ID: []string{"id"}}}, Schemas: reg})
	var wg sync.WaitGroup
	got := make([]cdc.Change, 4*50)
	errs := make([]error, len(got))
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				got[g*50+i], errs[g*50+i] = d.DecodeContext(context.Background(), rec)
			}
		})
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		require.Equal(t, want, got[i])
	}
	require.Equal(t, "2019-01-31", want.After["published_on"], "logical types decoded")
}
