package cdc

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// versionOf decodes a minimal envelope with the given source block and
// returns its version.
func versionOf(t *testing.T, source string) Version {
	t.Helper()
	v := fmt.Sprintf(`{"op":"u","after":{"id":1},"source":%s,"ts_ms":1700000000000}`, source)
	ch, err := NewDecoder(DecoderConfig{}).Decode(Record{Raw: Raw{Topic: "srv.s.t", Key: []byte(`{"id":1}`), Value: []byte(v)}})
	require.NoError(t, err)
	return ch.Version
}

// TestVersionOrder checks, per source kind, that the version the decoder
// derives orders two changes of one document the way the source did.
func TestVersionOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		older, newer  string
		wantKind      string
		wantSameOrder bool // older and newer are the same position
	}{
		{name: "pg lsn", older: `{"connector":"postgresql","lsn":24023128,"txId":900}`, newer: `{"connector":"postgresql","lsn":24023200,"txId":899}`, wantKind: KindPostgres},
		{name: "pg lsn as string", older: `{"connector":"postgresql","lsn":"9"}`, newer: `{"connector":"postgresql","lsn":10}`, wantKind: KindPostgres},
		{name: "pg lsn inferred without connector", older: `{"lsn":99}`, newer: `{"lsn":100}`, wantKind: KindPostgres},
		{name: "mysql pos", older: `{"connector":"mysql","file":"mysql-bin.000003","pos":154,"row":0}`, newer: `{"connector":"mysql","file":"mysql-bin.000003","pos":1046,"row":0}`, wantKind: KindMySQL},
		{name: "mysql row within event", older: `{"connector":"mysql","file":"mysql-bin.000003","pos":154,"row":0}`, newer: `{"connector":"mysql","file":"mysql-bin.000003","pos":154,"row":1}`, wantKind: KindMySQL},
		{name: "mysql file rollover", older: `{"connector":"mysql","file":"mysql-bin.000009","pos":99999999,"row":3}`, newer: `{"connector":"mysql","file":"mysql-bin.000010","pos":4,"row":0}`, wantKind: KindMySQL},
		{name: "mysql rollover past six digits", older: `{"connector":"mysql","file":"mysql-bin.999999","pos":5}`, newer: `{"connector":"mysql","file":"mysql-bin.1000000","pos":4}`, wantKind: KindMySQL},
		{name: "sqlserver commit before change", older: `{"connector":"sqlserver","commit_lsn":"00000027:00000758:0005","change_lsn":"00000027:00000758:0003"}`, newer: `{"connector":"sqlserver","commit_lsn":"00000027:00000ac0:0007","change_lsn":"00000027:00000ac0:0002"}`, wantKind: KindSQLServer},
		{name: "sqlserver change within commit", older: `{"connector":"sqlserver","commit_lsn":"00000027:00000ac0:0007","change_lsn":"00000027:00000ac0:0002"}`, newer: `{"connector":"sqlserver","commit_lsn":"00000027:00000ac0:0007","change_lsn":"00000027:00000ac0:0003"}`, wantKind: KindSQLServer},
		{name: "sqlserver vlf dominates", older: `{"connector":"sqlserver","commit_lsn":"00000027:ffffffff:ffff","change_lsn":"00000027:ffffffff:fffe"}`, newer: `{"connector":"sqlserver","commit_lsn":"00000028:00000001:0001","change_lsn":"00000028:00000001:0000"}`, wantKind: KindSQLServer},
		{name: "sqlserver snapshot before stream", older: `{"connector":"sqlserver","commit_lsn":"00000027:00000758:0005","change_lsn":null}`, newer: `{"connector":"sqlserver","commit_lsn":"00000027:00000758:0005","change_lsn":"00000027:00000758:0003"}`, wantKind: KindSQLServer},
		{name: "oracle commit_scn first", older: `{"connector":"oracle","scn":"500","commit_scn":"600"}`, newer: `{"connector":"oracle","scn":"450","commit_scn":"700"}`, wantKind: KindOracle},
		{name: "oracle scn within commit", older: `{"connector":"oracle","scn":"500","commit_scn":"600"}`, newer: `{"connector":"oracle","scn":"501","commit_scn":"600"}`, wantKind: KindOracle},
		{name: "oracle snapshot scn only", older: `{"connector":"oracle","scn":"400"}`, newer: `{"connector":"oracle","scn":"500","commit_scn":"600"}`, wantKind: KindOracle},
		{name: "mongo ord within second", older: `{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965508000,"ord":1}`, newer: `{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965508999,"ord":2}`, wantKind: KindMongo},
		{name: "mongo next second", older: `{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965508000,"ord":9}`, newer: `{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965509000,"ord":1}`, wantKind: KindMongo},
		{name: "mongo legacy ts_sec", older: `{"rs":"rs0","db":"d","collection":"c","ts_sec":1558965508,"ord":1}`, newer: `{"rs":"rs0","db":"d","collection":"c","ts_sec":1558965509,"ord":1}`, wantKind: KindMongo},
		{name: "ts fallback", older: `{"connector":"db2","ts_ms":1559729468470}`, newer: `{"connector":"db2","ts_ms":"1559729468471"}`, wantKind: KindTS},
		{name: "ts tie is equal", older: `{"connector":"db2","ts_ms":1559729468470}`, newer: `{"connector":"db2","ts_ms":1559729468470}`, wantKind: KindTS, wantSameOrder: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, n := versionOf(t, tc.older), versionOf(t, tc.newer)
			require.Equal(t, tc.wantKind, o.Kind)
			require.Equal(t, tc.wantKind, n.Kind)
			if tc.wantSameOrder {
				require.Equal(t, 0, o.Compare(n))
				return
			}
			require.Equal(t, -1, o.Compare(n), "%s vs %s", o, n)
			require.Equal(t, 1, n.Compare(o))
			back, err := ParseVersion(n.String())
			require.NoError(t, err)
			require.Equal(t, 0, back.Compare(n))
		})
	}
}

func TestVersionParts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		source string
		want   Version
	}{
		{name: "pg", source: `{"connector":"postgresql","lsn":24023128,"txId":555}`, want: Version{Kind: KindPostgres, Parts: []uint64{24023128}}},
		{name: "mysql", source: `{"connector":"mysql","file":"mysql-bin.000003","pos":1046,"row":2}`, want: Version{Kind: KindMySQL, Parts: []uint64{3, 1046, 2}}},
		{name: "mysql without row", source: `{"connector":"mysql","file":"mysql-bin.000003","pos":1046}`, want: Version{Kind: KindMySQL, Parts: []uint64{3, 1046, 0}}},
		{name: "mysql without position falls back to ts", source: `{"connector":"mysql","ts_ms":1700000000001}`, want: Version{Kind: KindTS, Parts: []uint64{1700000000001}}},
		{name: "sqlserver", source: `{"connector":"sqlserver","change_lsn":"00000027:00000758:0003","commit_lsn":"00000027:00000758:0005"}`, want: Version{Kind: KindSQLServer, Parts: []uint64{0x27, 0x758, 5, 0x27, 0x758, 3}}},
		{name: "oracle", source: `{"connector":"oracle","scn":"2122184","commit_scn":"2122185"}`, want: Version{Kind: KindOracle, Parts: []uint64{2122185, 2122184}}},
		{name: "mongo", source: `{"connector":"mongodb","ts_ms":1558965508000,"ord":31}`, want: Version{Kind: KindMongo, Parts: []uint64{1558965508, 31}}},
		{name: "mongo ts in ns", source: `{"connector":"mongodb","ts_ms":1558965508000000000,"ord":31}`, want: Version{Kind: KindMongo, Parts: []uint64{1558965508, 31}}},
		{name: "source ts_ms zero falls to envelope", source: `{"ts_ms":0}`, want: Version{Kind: KindTS, Parts: []uint64{1700000000000}}},
		{name: "pg without lsn falls back to ts", source: `{"connector":"postgresql","ts_ms":1678901234000}`, want: Version{Kind: KindTS, Parts: []uint64{1678901234000}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := versionOf(t, tc.source)
			// The commit time is checked by TestVersionTime.
			got.TS = 0
			require.Equal(t, tc.want, got)
		})
	}
}

// TestVersionTime: the decoder carries the source commit time and the
// snapshot flag in the version, and a MongoDB transaction's order (which
// every change of the transaction needs, since they share one cluster time)
// as a further part.
func TestVersionTime(t *testing.T) {
	t.Parallel()
	dec := NewDecoder(DecoderConfig{})
	decode := func(value string) Change {
		t.Helper()
		ch, err := dec.Decode(Record{Raw: Raw{Topic: "srv.s.t", Key: []byte(`{"id":1}`), Value: []byte(value)}})
		require.NoError(t, err)
		return ch
	}
	ch := decode(`{"op":"r","after":{"id":1},"source":{"connector":"postgresql","lsn":7,"ts_ms":1700000000123,"snapshot":"true"},"ts_ms":1700000009999}`)
	require.Equal(t, Version{Kind: KindPostgres, Parts: []uint64{7}, TS: 1700000000123, Snapshot: true}, ch.Version)

	ch = decode(`{"op":"u","after":{"id":1},"source":{"connector":"db2"},"ts_ms":1700000009999}`)
	require.Equal(t, Version{Kind: KindTS, Parts: []uint64{1700000009999}, TS: 1700000009999}, ch.Version, "envelope ts_ms is the last resort")

	// Two updates of one MongoDB document in one transaction (Debezium
	// MongoDB connector docs, "Transaction metadata"): same ts_ms and ord.
	tx := func(order int) string {
		return fmt.Sprintf(`{"op":"u","after":"{\"_id\": 1, \"n\": %d}","source":{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965508000,"ord":4},`+
			`"transaction":{"id":"1462833718356672513","total_order":%d,"data_collection_order":%d},"ts_ms":1558965508001}`, order, order, order)
	}
	first, second := decode(tx(1)).Version, decode(tx(2)).Version
	require.Equal(t, []uint64{1558965508, 4, 1}, first.Parts)
	require.Equal(t, -1, first.Compare(second), "the second change in a transaction is not a duplicate")

	// data_collection_order alone is enough.
	v := decode(`{"op":"u","after":"{\"_id\": 1}","source":{"connector":"mongodb","db":"d","collection":"c","ts_ms":1558965508000,"ord":4},"transaction":{"id":"x","data_collection_order":3}}`).Version
	require.Equal(t, []uint64{1558965508, 4, 3}, v.Parts)

	// A ts fallback inside a transaction block gets the order too.
	v = decode(`{"op":"u","after":{"id":1},"source":{"connector":"db2","ts_ms":1559729468470},"transaction":{"id":"t","total_order":2,"data_collection_order":1}}`).Version
	require.Equal(t, []uint64{1559729468470, 2}, v.Parts)

	_, err := dec.Decode(Record{Raw: Raw{Topic: "srv.s.t", Key: []byte(`{"id":1}`), Value: []byte(`{"op":"u","after":{"id":1},"source":{"connector":"db2","ts_ms":1},"transaction":{"id":"t","total_order":"x"}}`)}})
	require.Error(t, err, "a malformed total_order is a decode error")
}
