package cdc

import (
	"context"
	"errors"
	"fmt"
)

// SchemaDecoder decodes the keys and values that a schema registry's
// converters wrote (Avro, Protobuf or JSON Schema, in the registry's wire
// format: byte 0, a four-byte big-endian schema id, then the format's own
// bytes) into what Kafka Connect's JsonConverter with schemas.enable=true
// gives for the same change, already parsed, so that every format reaches
// the one Debezium reader and decodes to the same Change:
//
//   - payload is the value as the JSON parser's tree: objects as
//     map[string]any, arrays as []any, numbers as json.Number, bytes as
//     the base64 string JsonConverter writes, null as nil;
//   - schema is its Connect schema as JsonConverter writes it ("type",
//     "optional", "name", "version", "parameters", "field", "fields",
//     "items", "keys", "values"), so that Debezium's logical types
//     (io.debezium.time.Date, Decimal, Json, …) decode by name.
//
// A nil payload is a null value (a tombstone). The payload is the
// caller's (the decoder converts logical types in it in place): return a
// new tree for every call. The schema is only read, and may be shared. The package
// cdc/registry implements it against a Confluent-compatible registry.
type SchemaDecoder interface {
	DecodeFramed(ctx context.Context, topic string, isKey bool, b []byte) (payload any, schema map[string]any, err error)
}

// ErrRegistryUnavailable marks a SchemaDecoder error that is transient:
// the registry could not be reached or answered with a server error, so
// the same bytes may decode later. A source backs off and retries, and
// never dead-letters a record for it. Every other SchemaDecoder error is
// permanent (an unknown schema id, bytes the schema cannot decode) and
// dead-letters the record with the error, which names the id and subject.
var ErrRegistryUnavailable = errors.New("schema registry unavailable")

// IsFramed reports whether b is in the registry's wire format: JSON never
// starts with a zero byte, so the first byte tells the two apart.
func IsFramed(b []byte) bool { return len(b) >= 5 && b[0] == 0 }

// reasonFramedNoRegistry is the decode error of a framed record read
// without a registry configured.
const reasonFramedNoRegistry = "value is in a schema registry's wire format (Avro, Protobuf or JSON Schema): set source.kafka.registry.url, then replay the dead letters"

// reasonSchema is the decode error of a framed record its schema cannot
// decode.
const reasonSchema = "schema registry: cannot decode the record with its schema"

// framedValue decodes a framed value with the decoder's SchemaDecoder:
// the payload and schema for the Debezium reader, or a transient error
// (errors.Is ErrRegistryUnavailable) that is returned as it is, or a
// permanent one as a DecodeError.
func (d *Decoder) framedValue(ctx context.Context, m Record) (map[string]any, map[string]any, error) {
	v, schema, err := d.schemas.DecodeFramed(ctx, m.Topic, false, m.Value)
	switch {
	case errors.Is(err, ErrRegistryUnavailable):
		return nil, nil, err
	case err != nil:
		return nil, nil, &DecodeError{Reason: reasonSchema, Err: err}
	case v == nil:
		return nil, nil, &SkipError{Reason: SkipTombstone}
	}
	payload, ok := v.(map[string]any)
	if !ok {
		return nil, nil, &DecodeError{Reason: reasonPayload, Err: fmt.Errorf("got %s", describe(v))}
	}
	return payload, schema, nil
}

// framedKey decodes a framed message key into the fields in key order
// (the schema's field order), their values with logical types decoded,
// and for MongoDB the "id" as sent; see parseKey.
func (d *Decoder) framedKey(ctx context.Context, topic string, key []byte, mongo bool) ([]string, map[string]any, any, error) {
	v, schema, err := d.schemas.DecodeFramed(ctx, topic, true, key)
	switch {
	case errors.Is(err, ErrRegistryUnavailable):
		return nil, nil, nil, err
	case err != nil:
		return nil, nil, nil, decodeErr(reasonBadKey, "%v", err)
	case v == nil:
		return nil, nil, nil, nil
	}
	payload, ok := v.(map[string]any)
	if !ok {
		return nil, nil, nil, decodeErr(reasonBadKey, "want a struct, got %s", describe(v))
	}
	var order []string
	for _, f := range schemaFields(schema) {
		if name, _ := f["field"].(string); name != "" {
			if _, ok := payload[name]; ok {
				order = append(order, name)
			}
		}
	}
	return keyFields(payload, schema, order, mongo)
}

// schemaFields are the field schemas of a Connect struct schema, in order.
func schemaFields(s map[string]any) []map[string]any {
	fields, _ := s["fields"].([]any)
	out := make([]map[string]any, 0, len(fields))
	for _, f := range fields {
		if fm, ok := f.(map[string]any); ok {
			out = append(out, fm)
		}
	}
	return out
}
