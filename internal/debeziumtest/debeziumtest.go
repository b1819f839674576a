// Package debeziumtest builds Debezium PostgreSQL change events for tests:
// payload-only JsonConverter values with a source block carrying the LSN the
// decoder orders by, and {"id":N} keys, the shape a connector with
// schemas.enable=false produces.
package debeziumtest

import (
	"encoding/json"
	"fmt"

	"github.com/ragsync/ragsync/cdc"
)

// Message returns a change to public.<table> of document id at lsn. For op
// "d" the row is the before image's key only; for "t" (truncate) there is no
// key and no row; otherwise row is the after image (id is added to it).
func Message(table, op string, id int, lsn int64, row map[string]any) cdc.Record {
	p := map[string]any{
		"op": op,
		"source": map[string]any{"connector": "postgresql", "schema": "public", "table": table,
			"lsn": lsn, "txId": lsn, "ts_ms": 1700000000000},
	}
	switch op {
	case "d":
		p["before"] = map[string]any{"id": id}
	case "t":
	default:
		after := map[string]any{"id": id}
		for k, v := range row {
			after[k] = v
		}
		p["after"] = after
	}
	v, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("debeziumtest: encode event: %v", err)) // programmer error: rows are test literals
	}
	var key []byte
	if op != "t" {
		key = fmt.Appendf(nil, `{"id":%d}`, id)
	}
	return cdc.Record{Raw: cdc.Raw{Topic: "db.public." + table, Offset: lsn, Key: key, Value: v}}
}
