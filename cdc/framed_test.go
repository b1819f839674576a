package cdc

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// treeSchemas is a SchemaDecoder over fixed trees by schema id, standing in
// for a registry format.
type treeSchemas map[uint32]struct {
	payload func() any // a fresh tree per call: the decoder converts it in place
	schema  map[string]any
	err     error
}

func (s treeSchemas) DecodeFramed(_ context.Context, _ string, _ bool, b []byte) (any, map[string]any, error) {
	e, ok := s[binary.BigEndian.Uint32(b[1:5])]
	if !ok {
		return nil, nil, fmt.Errorf("schema id %d is not in the registry", binary.BigEndian.Uint32(b[1:5]))
	}
	if e.payload == nil {
		return nil, e.schema, e.err
	}
	return e.payload(), e.schema, e.err
}

func frame(id uint32) []byte {
	b := make([]byte, 6)
	binary.BigEndian.PutUint32(b[1:5], id)
	return b
}

func TestFramedRecords(t *testing.T) {
	field := func(name, typ, logical string) any {
		m := map[string]any{"field": name, "type": typ, "optional": false}
		if logical != "" {
			m["name"] = logical
		}
		return m
	}
	row := map[string]any{"type": "struct", "fields": []any{field("tenant", "string", ""), field("id", "int32", ""), field("due", "int32", ltDate)}}
	value := func() any {
		return map[string]any{
			"op":    "c",
			"after": map[string]any{"tenant": "acme", "id": json.Number("7"), "due": json.Number("19000")},
			"source": map[string]any{"connector": "postgresql", "name": "dbserver1", "db": "app", "schema": "public", "table": "tasks",
				"lsn": json.Number("1000"), "ts_ms": json.Number("1700000000000")},
		}
	}
	envelope := map[string]any{"type": "struct", "name": "dbserver1.public.tasks.Envelope", "fields": []any{
		map[string]any{"field": "after", "type": "struct", "optional": true, "fields": row["fields"]},
	}}
	// The key's field order comes from its schema: id before tenant.
	keySchema := map[string]any{"type": "struct", "fields": []any{field("id", "int32", ""), field("tenant", "string", "")}}
	schemas := treeSchemas{
		1: {payload: value, schema: envelope},
		2: {payload: func() any { return map[string]any{"tenant": "acme", "id": json.Number("7")} }, schema: keySchema},
		3: {err: fmt.Errorf("dial tcp: connection refused: %w", ErrRegistryUnavailable)},
		4: {},
	}
	d := NewDecoder(DecoderConfig{Schemas: schemas})
	rec := Record{Raw: Raw{Topic: "dbserver1.public.tasks", Offset: 9, Key: frame(2), Value: frame(1)}}

	ch, err := d.Decode(rec)
	require.NoError(t, err)
	require.Equal(t, "2022-01-08", ch.After["due"], "logical types decode by their Connect name")
	require.Equal(t, "7/acme", ch.DocKey, "key fields join in the key schema's order")

	transient := rec
	transient.Value = frame(3)
	_, err = d.Decode(transient)
	require.ErrorIs(t, err, ErrRegistryUnavailable)
	var de *DecodeError
	require.False(t, errors.As(err, &de), "an unreachable registry is no decode error")
	got, err := DecodeContext(context.Background(), d, transient)
	require.ErrorIs(t, err, ErrRegistryUnavailable)
	require.Nil(t, got.Err, "the record is not marked for the dead letters")

	tomb := rec
	tomb.Value = frame(4)
	_, err = d.Decode(tomb)
	require.ErrorIs(t, err, ErrSkip)

	unknown := rec
	unknown.Value = frame(5)
	_, err = d.Decode(unknown)
	require.ErrorAs(t, err, &de)
	require.Equal(t, reasonSchema, de.Reason)
	require.Equal(t, int64(9), de.Coord.Offset)
	require.Contains(t, de.Error(), "schema id 5")

	badKey := rec
	badKey.Key = frame(3)
	_, err = d.Decode(badKey)
	require.ErrorIs(t, err, ErrRegistryUnavailable, "a key whose schema cannot be had now waits too")

	_, err = NewDecoder(DecoderConfig{}).Decode(rec)
	require.ErrorAs(t, err, &de)
	require.Equal(t, reasonFramedNoRegistry, de.Reason, "without a registry the error names the setting")
}
