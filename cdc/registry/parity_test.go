package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/registry/srtest"
)

// parityFormat is one registry format the parity test writes every corpus
// message in. encode writes the message (its Connect schema, the JSON
// converter's schema or one inferred from the JSON, and its payload, the
// JSON converter's tree) as that format's converter would: the schema to
// register and the record's bytes after the five-byte header. It calls
// t.Skip for a payload its schema cannot hold.
type parityFormat struct {
	name   string
	encode func(t testing.TB, connectSchema map[string]any, payload any) (schemaType, schemaText string, body []byte)
}

// parityFormats are the formats under test: Avro (encodeAvro), Protobuf
// (encodeProtobuf) and JSON Schema (encodeJSONSchema).
var parityFormats = []parityFormat{
	{"avro", encodeAvro},
	{"protobuf", encodeProtobuf},
	{"jsonschema", encodeJSONSchema},
}

// sharedCorpusIDs are the table id columns the corpus test (cdc's
// corpusWants) configures for the held-out corpus's files; the others
// decode with the message key alone.
var sharedCorpusIDs = map[string][]string{
	"mongo-delete-docs.json":                {"_id"},
	"mongo-delete-oplog-filter.json":        {"_id"},
	"mongo-update-change-streams-docs.json": {"_id"},
	"mongo-update-oplog-patch.json":         {"_id"},
	"mysql-create-serde-with-schema.json":   {"id"},
	"mysql-delete-tutorial.json":            {"id"},
	"mysql-read-engine-wasm.json":           {"id"},
	"mysql-update-engine-wasm.json":         {"id"},
	"mysql-update-serde.json":               {"id"},
	"mysql-update-tutorial.json":            {"id"},
	"pg-create-docs.json":                   {"id"},
	"pg-create-kafka-ssl.json":              {"id"},
	"pg-create-microtimestamp.json":         {"id"},
	"pg-create-with-transaction-block.json": {"pk"},
	"pg-create-zoned-timestamp.json":        {"id"},
	"pg-delete-docs.json":                   {"id"},
	"pg-message-decoded-after-smt.json":     {"id"},
	"pg-read-snapshot-payload-only.json":    {"id"},
	"pg-update-default-docs.json":           {"id"},
	"pg-update-toast-unavailable.json":      {"id"},
	"sqlserver-create-docs.json":            {"id"},
	"sqlserver-update-docs.json":            {"id"},
}

// unrepresentable are the corpus messages whose payload contradicts its own
// schema, which no converter could have written (the corpus copies some
// from documentation, edited by hand). The JSON reader reads them, leniently;
// a schema-driven format cannot write them, so the parity test leaves them
// out, and fails if one of them becomes writable (then it belongs in the
// test again).
var unrepresentable = map[string]string{
	"debezium/mongo-create-docs.json":        "source.ts_us is null but not optional",
	"debezium/mysql-schema-change-docs.json": "tableChanges[].table.columns[].length is a number but typed string",
	"debezium/pg-create-docs.json":           "source has fields its schema lacks",
	"debezium/sqlserver-create-docs.json":    "source.event_serial_no is a string but typed int64",
}

// parityMessage is one corpus message.
type parityMessage struct {
	name       string // directory/file
	topic      string
	key, value []byte
	ids        []string
}

func parityCorpus(t *testing.T) []parityMessage {
	t.Helper()
	var out []parityMessage
	add := func(dir, topic string, ids map[string][]string) {
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, ".key.json") {
				continue
			}
			v, err := os.ReadFile(f)
			require.NoError(t, err)
			k, _ := os.ReadFile(strings.TrimSuffix(f, ".json") + ".key.json")
			base := filepath.Base(f)
			out = append(out, parityMessage{name: filepath.Base(dir) + "/" + base, topic: topic, key: k, value: v, ids: ids[base]})
		}
	}
	add(filepath.Join("..", "testdata"), "dbserver1.public.articles", nil)
	shared := filepath.Join("..", "..", "..", "shared", "data", "debezium")
	if _, err := os.Stat(shared); err == nil {
		add(shared, "dbserver1.corpus.fallback", sharedCorpusIDs)
	} else {
		t.Logf("Debezium corpus not present at %s: parity over cdc/testdata only", shared)
	}
	require.NotEmpty(t, out)
	return out
}

// TestParity decodes every corpus message twice, as Debezium JSON and
// through the registry in each format, and requires the same Change, or
// the same skip reason, or a decode error both ways.
func TestParity(t *testing.T) {
	t.Parallel()
	corpus := parityCorpus(t)
	// table[format][kind] counts outcomes: the parity table.
	type cell struct{ same, differ, na int }
	table := map[string]map[string]*cell{}
	// skipped are the messages some format's encoder could not write: every
	// entry of unrepresentable must be one, or the list has gone stale.
	skipped := map[string]bool{}
	names := map[string]bool{}
	for _, m := range corpus {
		names[m.name] = true
	}
	t.Cleanup(func() {
		for name, why := range unrepresentable {
			if names[name] && !skipped[name] {
				t.Errorf("%s is listed in unrepresentable (%s) but every format wrote it: take it off the list", name, why)
			}
		}
	})
	for _, pf := range parityFormats {
		table[pf.name] = map[string]*cell{}
		srv := srtest.New(t, srtest.Options{})
		reg, err := New(Config{URL: srv.URL()})
		require.NoError(t, err)
		for _, m := range corpus {
			var cfg cdc.DecoderConfig
			if m.ids != nil {
				cfg.Tables = []cdc.TableConfig{{Match: "*", ID: m.ids}}
			}
			rec := cdc.Record{Raw: cdc.Raw{Topic: m.topic, Partition: 1, Offset: 7, Key: m.key, Value: m.value}}
			want, wantErr := cdc.NewDecoder(cfg).Decode(rec)
			kind := changeKind(want, wantErr)
			c := table[pf.name][kind]
			if c == nil {
				c = &cell{}
				table[pf.name][kind] = c
			}
			na := false
			ok := t.Run(pf.name+"/"+m.name, func(t *testing.T) {
				why, known := unrepresentable[m.name]
				t.Cleanup(func() {
					var de *cdc.DecodeError
					switch {
					case t.Skipped():
						na = true
						skipped[m.name] = true
						if !known && !errors.As(wantErr, &de) {
							t.Errorf("only a message the JSON decoder refuses, or one listed in unrepresentable, may be left out, but it gave %v", wantErr)
						}
					case known:
						// JSON Schema writes a payload that contradicts its
						// schema as it is; a binary format's encoder cannot.
						t.Logf("listed in unrepresentable (%s) but %s wrote it", why, pf.name)
					}
				})
				framed := rec
				framed.Value = frameMessage(t, srv, pf, m.topic+"-value", m.value)
				framed.Key = frameMessage(t, srv, pf, m.topic+"-key", m.key)
				cfg.Schemas = reg
				got, err := cdc.NewDecoder(cfg).DecodeContext(t.Context(), framed)
				require.NotErrorIs(t, err, cdc.ErrRegistryUnavailable)
				var skip *cdc.SkipError
				var de *cdc.DecodeError
				switch {
				case errors.As(wantErr, &skip):
					var gotSkip *cdc.SkipError
					require.ErrorAs(t, err, &gotSkip)
					require.Equal(t, skip.Reason, gotSkip.Reason)
				case errors.As(wantErr, &de):
					var gotDE *cdc.DecodeError
					require.ErrorAs(t, err, &gotDE, "JSON: %v", wantErr)
					t.Logf("JSON: %v; %s: %v", wantErr, pf.name, err)
				default:
					require.NoError(t, err)
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("change differs (-json +%s):\n%s", pf.name, diff)
					}
				}
			})
			switch {
			case na:
				c.na++
			case ok:
				c.same++
			default:
				c.differ++
			}
		}
	}
	var b strings.Builder
	kinds := []string{"create", "update", "delete", "read", "truncate", "message", "skip:tombstone", "skip:transaction", "skip:schema_change", "skip:heartbeat", "error"}
	fmt.Fprintf(&b, "parity (same/differ/not encodable) over %d messages\n%-20s", len(corpus), "kind")
	for _, pf := range parityFormats {
		fmt.Fprintf(&b, " %-14s", pf.name)
	}
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n%-20s", k)
		for _, pf := range parityFormats {
			c := table[pf.name][k]
			if c == nil {
				c = &cell{}
			}
			fmt.Fprintf(&b, " %-14s", fmt.Sprintf("%d/%d/%d", c.same, c.differ, c.na))
		}
	}
	t.Log(b.String())
}

// changeKind names the row of the parity table a JSON outcome falls in.
func changeKind(ch cdc.Change, err error) string {
	var skip *cdc.SkipError
	switch {
	case errors.As(err, &skip):
		return "skip:" + skip.Reason
	case err != nil:
		return "error"
	}
	switch ch.Op {
	case cdc.OpCreate:
		return "create"
	case cdc.OpUpdate:
		return "update"
	case cdc.OpDelete:
		return "delete"
	case cdc.OpRead:
		return "read"
	case cdc.OpTruncate:
		return "truncate"
	case cdc.OpMessage:
		return "message"
	}
	return string(ch.Op)
}

// frameMessage writes a JSON message (possibly in JsonConverter's
// {"schema","payload"} envelope) in format pf, registered under subject: a
// null message stays null (a tombstone has no schema), and JSON that does
// not parse skips the test, since no converter could have written it.
func frameMessage(t *testing.T, srv *srtest.Server, pf parityFormat, subject string, msg []byte) []byte {
	t.Helper()
	trimmed := bytes.TrimSpace(msg)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil
	}
	var payload any
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	if err := dec.Decode(&payload); err != nil || !json.Valid(msg) {
		t.Skipf("not JSON: %v", err)
	}
	// Go's parser replaces invalid UTF-8 and lone surrogate escapes with
	// U+FFFD; no converter writes either, and cdc refuses both.
	if !utf8.Valid(msg) || hasLoneSurrogate(msg) {
		t.Skip("not text a converter writes: invalid UTF-8 or a lone surrogate escape")
	}
	tree, err := orderedJSON(msg)
	require.NoError(t, err)
	var schema map[string]any
	if top, ok := payload.(map[string]any); ok && len(top) == 2 && hasKeys(top, "schema", "payload") {
		if top["payload"] == nil {
			return nil
		}
		payload = top["payload"]
		schema, _ = top["schema"].(map[string]any)
		tree = tree.(orderedObject).get("payload")
	}
	if schema["type"] == nil { // no schema, or an empty one
		schema = inferConnect(tree)
		schema["optional"] = false
	}
	typ, text, body := pf.encode(t, schema, payload)
	id := srv.Register(subject, typ, text)
	return srtest.Frame(id, body)
}

func hasKeys(m map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// hasLoneSurrogate reports a UTF-16 surrogate escape in JSON text b that
// is not a high-low pair.
func hasLoneSurrogate(b []byte) bool {
	unit := func(i int) (uint64, bool) {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return n, err == nil
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		u, ok := unit(i)
		switch {
		case !ok:
			i++ // an escape such as \\ or \"
		case u >= 0xd800 && u < 0xdc00:
			if lo, ok := unit(i + 6); !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case u >= 0xdc00 && u <= 0xdfff:
			return true
		default:
			i += 5
		}
	}
	return false
}

// orderedObject is a JSON object with its keys in order, which inference
// needs: a struct's fields are in the order written, and a key's field
// order is the document key's.
type orderedObject []orderedField

type orderedField struct {
	name  string
	value any
}

func (o orderedObject) get(name string) any {
	for _, f := range o {
		if f.name == name {
			return f.value
		}
	}
	return nil
}

// orderedJSON parses b with objects as orderedObject, numbers as
// json.Number.
func orderedJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var read func() (any, error)
	read = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch tok {
		case json.Delim('{'):
			var o orderedObject
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := read()
				if err != nil {
					return nil, err
				}
				o = slices.DeleteFunc(o, func(f orderedField) bool { return f.name == k.(string) })
				o = append(o, orderedField{k.(string), v})
			}
			_, err := dec.Token()
			return o, err
		case json.Delim('['):
			a := []any{}
			for dec.More() {
				v, err := read()
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
		return tok, nil
	}
	return read()
}

// inferConnect infers a Connect schema from a schemaless JSON value per
// Debezium's documented mapping back from JSON: integers int64, other
// numbers float64 (Connect's "double"), strings, booleans, objects as
// structs and arrays of their first non-null element's type. Every field
// is optional, and a null is an optional string: JSON does not say more.
func inferConnect(v any) map[string]any {
	switch v := v.(type) {
	case orderedObject:
		fields := make([]any, 0, len(v))
		for _, f := range v {
			fs := inferConnect(f.value)
			fs["optional"] = true
			fs["field"] = f.name
			fields = append(fields, fs)
		}
		return map[string]any{"type": "struct", "fields": fields}
	case []any:
		items := map[string]any{"type": "string"}
		for _, e := range v {
			if e != nil {
				items = inferConnect(e)
				break
			}
		}
		items["optional"] = true
		return map[string]any{"type": "array", "items": items}
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return map[string]any{"type": "int64"}
		}
		return map[string]any{"type": "double"}
	case bool:
		return map[string]any{"type": "boolean"}
	}
	return map[string]any{"type": "string"}
}
