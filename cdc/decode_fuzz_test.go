package cdc

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary keys and values to Decode. Whatever the input,
// it must not panic, must return exactly one of a change, a *SkipError or a
// *DecodeError naming the message, and a change must honour the contract the
// pipeline relies on.
func FuzzDecode(f *testing.F) {
	var files []string
	for _, dir := range []string{"testdata", filepath.Join("..", "..", "shared", "data", "debezium")} {
		m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		files = append(files, m...)
	}
	for _, file := range files {
		if strings.HasSuffix(file, ".key.json") {
			continue
		}
		v, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		k, _ := os.ReadFile(strings.TrimSuffix(file, ".json") + ".key.json")
		f.Add(k, v)
	}
	f.Add([]byte(`{"id":1}`), []byte(`{"id":1,"__deleted":"true","__lsn":5}`))
	f.Add([]byte(nil), []byte(`[[[[[[[[[[]]]]]]]]]]`))

	d := NewDecoder(DecoderConfig{Tables: []TableConfig{{Match: "inventory.*", ID: []string{"id"}}}})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		m := Record{Raw: Raw{Topic: "dbserver1.inventory.customers", Partition: 1, Offset: 99, Key: key, Value: value}}
		ch, err := d.Decode(m)
		var skip *SkipError
		var de *DecodeError
		switch {
		case errors.As(err, &skip):
			if !errors.Is(err, ErrSkip) || skip.Reason == "" {
				t.Fatalf("bad skip: %v", err)
			}
			return
		case errors.As(err, &de):
			if de.Coord != (Coord{Topic: m.Topic, Partition: 1, Offset: 99}) || de.Reason == "" {
				t.Fatalf("decode error without coordinates or reason: %#v", de)
			}
			return
		case err != nil:
			t.Fatalf("untyped error: %v", err)
		}
		if _, err := json.Marshal(ch); err != nil {
			t.Fatalf("change does not marshal: %v", err)
		}
		switch ch.Op {
		case OpCreate, OpUpdate, OpRead, OpDelete:
			if ch.DocKey == "" || ch.Table == "" || ch.Version.IsZero() {
				t.Fatalf("row change without key, table or version: %+v", ch)
			}
			if (ch.Op == OpCreate || ch.Op == OpRead) && ch.After == nil {
				t.Fatalf("op %s without after", ch.Op)
			}
			for _, c := range ch.Unavailable {
				if _, ok := ch.After[c]; ok {
					t.Fatalf("unavailable column %q still in after", c)
				}
			}
		case OpTruncate:
			if ch.Table == "" || ch.Version.IsZero() || ch.DocKey != "" {
				t.Fatalf("bad truncate: %+v", ch)
			}
		case OpMessage:
		default:
			t.Fatalf("unknown op %q returned", ch.Op)
		}
		if back, err := ParseVersion(ch.Version.String()); !ch.Version.IsZero() && (err != nil || back.Compare(ch.Version) != 0) {
			t.Fatalf("version %v does not round-trip: %v", ch.Version, err)
		}
	})
}
