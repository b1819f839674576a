package registry

import (
	"encoding/binary"
	"fmt"
)

// format decodes the bytes of one schema (an Avro, Protobuf or JSON
// Schema compiled once per schema id) into what the JSON converter gives
// for the same record (see cdc.SchemaDecoder): the payload as the JSON
// parser's tree and its Connect schema in JsonConverter's form.
type format interface {
	// decode decodes body, the record's bytes after the five-byte header
	// (for Protobuf, starting with the message indexes).
	decode(body []byte) (payload any, connect map[string]any, err error)
}

// Connect's own logical type names (org.apache.kafka.connect.data), which
// each format's logical types map to (Avro's decimal, date, time-millis and
// timestamp-millis; Protobuf's confluent.type.Decimal, google.type.Date,
// google.type.TimeOfDay and google.protobuf.Timestamp).
const (
	connectDecimal   = "org.apache.kafka.connect.data.Decimal"
	connectDate      = "org.apache.kafka.connect.data.Date"
	connectTime      = "org.apache.kafka.connect.data.Time"
	connectTimestamp = "org.apache.kafka.connect.data.Timestamp"
)

// header splits a record in the registry's wire format into its schema id
// and body: byte 0, the id as a four-byte big-endian integer, then the
// format's bytes.
func header(b []byte) (id int, body []byte, err error) {
	if len(b) < 5 || b[0] != 0 {
		return 0, nil, fmt.Errorf("not in the schema registry's wire format (want byte 0 and a four-byte schema id)")
	}
	return int(binary.BigEndian.Uint32(b[1:5])), b[5:], nil
}
