package pgrepl_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
)

// debeziumParityEvent is what Debezium's PostgreSQL connector (defaults:
// decimal.handling.mode=precise, time.precision.mode=adaptive,
// binary.handling.mode=bytes) writes for the row of
// TestPostgresSourceDecodesLikeDebezium, written by hand from its
// documentation ("Data type mappings"); %s is the after image's toasted
// column and %s the op.
const debeziumParityEvent = `{"schema":{"type":"struct","name":"dbserver1.public.parity.Envelope","fields":[
 {"field":"after","type":"struct","optional":true,"fields":[
  {"field":"id","type":"int32"},
  {"field":"amount","type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"3","connect.decimal.precision":"12"}},
  {"field":"neg","type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"0"}},
  {"field":"ts","type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp"},
  {"field":"tstz","type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp"},
  {"field":"d","type":"int32","optional":true,"name":"io.debezium.time.Date"},
  {"field":"t","type":"int64","optional":true,"name":"io.debezium.time.MicroTime"},
  {"field":"doc","type":"string","optional":true,"name":"io.debezium.data.Json"},
  {"field":"tags","type":"array","optional":true,"items":{"type":"string","optional":true}},
  {"field":"nums","type":"array","optional":true,"items":{"type":"int32","optional":true}},
  {"field":"raw","type":"bytes","optional":true},
  {"field":"uid","type":"string","optional":true,"name":"io.debezium.data.Uuid"},
  {"field":"flag","type":"boolean","optional":true},
  {"field":"big","type":"int64","optional":true},
  {"field":"f","type":"double","optional":true},
  {"field":"nothing","type":"string","optional":true},
  {"field":"toasted","type":"string","optional":true}]},
 {"field":"source","type":"struct","fields":[]},
 {"field":"op","type":"string"},{"field":"ts_ms","type":"int64","optional":true}]},
"payload":{"before":null,"after":{
  "id":1,"amount":"ALxhTg==","neg":"+w==","ts":1709618828123456,"tstz":"2024-03-05T06:07:08.5Z",
  "d":19787,"t":45296789000,"doc":"{\"a\": [1, 2.5], \"b\": null, \"c\": \"é\"}",
  "tags":["x","y z","a,b",null,"q\"uote"],"nums":[1,-2,3],"raw":"AP8Q",
  "uid":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","flag":true,"big":9007199254740993,"f":1.5,
  "nothing":null,"toasted":%s},
 "source":{"version":"2.7.0.Final","connector":"postgresql","name":"dbserver1","ts_ms":1709618828000,"snapshot":"false",
  "db":"app","schema":"public","table":"parity","txId":777,"lsn":24023128},
 "op":"%s","ts_ms":1709618828100}}`

// TestPostgresSourceDecodesLikeDebezium: each column type decodes to the
// same value as from the equivalent Debezium event, whether the row comes
// from the initial load's snapshot read or from pgoutput, including an
// unchanged TOASTed column on update.
func TestPostgresSourceDecodesLikeDebezium(t *testing.T) {
	b := pgSetup(t)
	tbl := b.r.Schema + ".parity"
	b.r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, amount numeric(12,3), neg numeric, ts timestamp, tstz timestamptz,
		d date, t time, doc jsonb, tags text[], nums int[], raw bytea, uid uuid, flag bool, big bigint, f float8, nothing text, toasted text)`, tbl))
	// Random text does not compress, so it is stored out of line (TOAST).
	var sb strings.Builder
	for i := range 4000 {
		fmt.Fprintf(&sb, "%08x", uint32(i)*2654435761)
	}
	big := sb.String()
	cfg := b.config()
	cfg.Tables = []cdc.TableConfig{{Match: tbl}}
	cfg.InitialLoad = true
	row := `(%d, 12345.678, -5, '2024-03-05 06:07:08.123456', '2024-03-05 07:07:08.5+01',
		'2024-03-05', '12:34:56.789', '{"b": null, "a": [1, 2.5], "c": "é"}', ARRAY['x','y z','a,b',NULL,'q"uote'], '{1,-2,3}',
		'\x00ff10', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, 9007199254740993, 1.5, NULL, $1)`
	// Row 1 reaches the index through the initial load (a snapshot read),
	// row 2 through the stream, then an update of row 1 leaves its TOAST
	// value unchanged: all three must decode as Debezium's events do.
	b.r.Exec(t, fmt.Sprintf("INSERT INTO %s VALUES "+row, tbl, 1), big)
	s := b.source(t, cfg)
	got := b.fetch(t, s, 1, true)
	b.r.Exec(t, fmt.Sprintf("INSERT INTO %s VALUES "+row, tbl, 2), big)
	b.r.Exec(t, fmt.Sprintf(`UPDATE %s SET flag = true WHERE id = 1`, tbl))
	got = append(got, b.fetch(t, s, 2, true)...)

	dec := cdc.NewDecoder(cdc.DecoderConfig{})
	for i, tc := range []struct {
		op, toasted string
		id          int
	}{
		{"r", fmt.Sprintf("%q", big), 1},
		{"c", fmt.Sprintf("%q", big), 2},
		{"u", `"__debezium_unavailable_value"`, 1},
	} {
		ev := strings.Replace(fmt.Sprintf(debeziumParityEvent, tc.toasted, tc.op), `"id":1,`, fmt.Sprintf(`"id":%d,`, tc.id), 1)
		want, err := dec.Decode(cdc.Record{Raw: cdc.Raw{Topic: "dbserver1.public.parity", Key: fmt.Appendf(nil, `{"id":%d}`, tc.id), Value: []byte(ev)}})
		require.NoError(t, err)
		require.Equal(t, cdc.Op(tc.op), got[i].Op)
		if diff := cmp.Diff(want.After, got[i].After); diff != "" {
			t.Errorf("op %s: after differs (-debezium +pgoutput):\n%s", tc.op, diff)
		}
		require.Equal(t, want.Unavailable, got[i].Unavailable, "op %s", tc.op)
		require.Equal(t, want.DocKey, got[i].DocKey)
		require.Equal(t, want.Key, got[i].Key)
	}
	require.Equal(t, "2024-03-05T06:07:08.5Z", got[0].After["tstz"], "a timestamptz is RFC 3339 UTC with Z, as Debezium's ZonedTimestamp")
	require.Equal(t, []string{"toasted"}, got[2].Unavailable, "the unchanged TOAST value is reported as Debezium's placeholder is")
}
