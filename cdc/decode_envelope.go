package cdc

import (
	"fmt"
	"slices"
	"strings"
)

// Debezium's default unavailable.value.placeholder, as text and as the
// base64 of its bytes (what binary columns carry).
const (
	unavailablePlaceholder    = "__debezium_unavailable_value"
	unavailablePlaceholderB64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="
)

func decodeErr(reason string, format string, args ...any) *DecodeError {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// envelopeEvent reads a Debezium envelope: op, source, before/after (and
// MongoDB's patch/filter), with logical types decoded by the value schema.
func envelopeEvent(p, schema map[string]any) (event, error) {
	rawOp, hasOp := p["op"]
	if !hasOp {
		return event{}, &DecodeError{Reason: reasonNoOp}
	}
	opStr, ok := rawOp.(string)
	if !ok {
		return event{}, decodeErr(reasonBadField, "op: want a string, got %s", describe(rawOp))
	}
	op := Op(opStr)
	switch op {
	case OpCreate, OpUpdate, OpDelete, OpRead, OpTruncate, OpMessage:
	default:
		return event{}, decodeErr(reasonUnknownOp, "op %q", opStr)
	}
	ev := event{op: op, payload: p, src: map[string]any{}}
	switch s := p["source"].(type) {
	case nil:
	case map[string]any:
		ev.src = s
	default:
		return event{}, decodeErr(reasonBadField, "source: want an object, got %s", describe(s))
	}
	if tx, ok := p["transaction"]; ok && tx != nil {
		if _, isObj := tx.(map[string]any); !isObj {
			return event{}, decodeErr(reasonBadField, "transaction: want an object, got %s", describe(tx))
		}
	}
	if op == OpTruncate || op == OpMessage {
		return ev, nil // no row images, by definition
	}
	mongo := connectorKind(ev.src) == KindMongo
	var err error
	if ev.before, _, ev.ids[1], err = rowImage(p, "before", schemaField(schema, "before"), mongo); err != nil {
		return event{}, err
	}
	if ev.after, ev.unavail, ev.ids[0], err = rowImage(p, "after", schemaField(schema, "after"), mongo); err != nil {
		return event{}, err
	}
	if mongo || p["patch"] != nil || p["filter"] != nil {
		if err := mongoOplog(&ev, p); err != nil {
			return event{}, err
		}
	}
	switch {
	case (op == OpCreate || op == OpRead) && ev.after == nil:
		return event{}, decodeErr(reasonNoRow, "op %s has no after", op)
	case op == OpUpdate && ev.after == nil && !mongo:
		// Only MongoDB may send an update without the new row (see Decode).
		return event{}, decodeErr(reasonNoRow, "op u has no after")
	}
	return ev, nil
}

// mongoOplog reads the legacy oplog fields: "patch" (the update, extended
// JSON) and "filter" (the selector holding _id).
func mongoOplog(ev *event, p map[string]any) error {
	if p["filter"] != nil {
		f, id, err := mongoDoc(p["filter"])
		if err != nil {
			return decodeErr(reasonBadRow, "filter: %v", err)
		}
		ev.filter, ev.ids[2] = f, id
		if ev.op == OpDelete && ev.before == nil {
			// An oplog delete carries only its filter: that is the identity
			// of the deleted document, so it stands in for the before image.
			ev.before, ev.ids[1] = f, id
		}
	}
	if p["patch"] != nil && ev.after == nil {
		patch, id, err := mongoDoc(p["patch"])
		if err != nil {
			return decodeErr(reasonBadRow, "patch: %v", err)
		}
		// A patch with update operators ($set, $unset…) is a partial
		// change: After stays nil, the stored row is kept. Without operators
		// the oplog entry is a whole-document replacement.
		if !slices.ContainsFunc(mapKeys(patch), func(k string) bool { return strings.HasPrefix(k, "$") }) {
			ev.after, ev.ids[0] = patch, id
		}
	}
	return nil
}

func mapKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// rowImage returns payload[field] as a row: nil when absent or null, parsed
// when it is a JSON string (MongoDB), converted by its Connect schema, with
// unchanged-TOAST placeholders removed (and returned, sorted). For a
// MongoDB document it also returns the _id as sent (see plainDoc).
func rowImage(p map[string]any, field string, s map[string]any, mongo bool) (map[string]any, []string, any, error) {
	var row map[string]any
	switch v := p[field].(type) {
	case nil:
		return nil, nil, nil, nil
	case string:
		doc, id, err := mongoDoc(v)
		if err != nil {
			return nil, nil, nil, decodeErr(reasonBadRow, "%s: %v", field, err)
		}
		return doc, nil, id, nil
	case map[string]any:
		row = v
	default:
		return nil, nil, nil, decodeErr(reasonBadRow, "%s: want an object, got %s", field, describe(v))
	}
	if mongo {
		doc, id := plainDoc(row)
		return doc, nil, id, nil
	}
	unavail := stripUnavailable(row)
	if typ, _ := s["type"].(string); typ == "struct" {
		if err := convertRow(row, s); err != nil {
			return nil, nil, nil, decodeErr(reasonBadValue, "%s: %v", field, err)
		}
	}
	return row, unavail, nil, nil
}

// stripUnavailable removes the columns whose value is Debezium's
// unchanged-TOAST placeholder (text, bytes, or a one-element array for
// array columns) and returns their names, sorted.
func stripUnavailable(row map[string]any) []string {
	var cols []string
	for k, v := range row {
		if isUnavailable(v) {
			cols = append(cols, k)
			delete(row, k)
		}
	}
	slices.Sort(cols)
	return cols
}

func isUnavailable(v any) bool {
	switch v := v.(type) {
	case string:
		return v == unavailablePlaceholder || v == unavailablePlaceholderB64
	case []any:
		if len(v) == 1 {
			s, ok := v[0].(string)
			return ok && (s == unavailablePlaceholder || s == unavailablePlaceholderB64)
		}
	}
	return false
}

// flattenedEvent reads a row flattened by ExtractNewRecordState. Its "__"
// fields (add.fields, add.headers into the value, delete.handling.mode=
// rewrite) describe the change; everything else is the row. The SMT names
// source fields "__source_<f>" and others "__<f>"; both feed the source
// block, the source_ form winning.
func flattenedEvent(p, schema map[string]any) (event, error) {
	row := make(map[string]any, len(p))
	src := map[string]any{}
	env := map[string]any{}
	var rawOp, deleted any
	for k, v := range p {
		name, isMeta := strings.CutPrefix(k, "__")
		if !isMeta {
			row[k] = v
			continue
		}
		switch name {
		case "op":
			rawOp = v
		case "deleted":
			deleted = v
		case "ts_ms":
			env["ts_ms"] = v
		default:
			if _, isSource := strings.CutPrefix(name, "source_"); !isSource {
				src[name] = v
			}
		}
	}
	for k, v := range p {
		if name, ok := strings.CutPrefix(k, "__source_"); ok {
			src[name] = v
		}
	}
	ev := event{op: OpUpdate, src: src, payload: env}
	switch v := rawOp.(type) {
	case nil:
		// No add.fields=op: the row is the state after the change, i.e. an
		// upsert.
	case string:
		switch Op(v) {
		case OpCreate, OpUpdate, OpRead, OpDelete:
			ev.op = Op(v)
		default:
			return event{}, decodeErr(reasonUnknownOp, "__op %q", v)
		}
	default:
		return event{}, decodeErr(reasonBadField, "__op: want a string, got %s", describe(v))
	}
	switch v := deleted.(type) {
	case nil:
	case bool:
		if v {
			ev.op = OpDelete
		}
	case string:
		if strings.EqualFold(v, "true") {
			ev.op = OpDelete
		} else if !strings.EqualFold(v, "false") {
			return event{}, decodeErr(reasonBadField, "__deleted: want true or false, got %q", v)
		}
	default:
		return event{}, decodeErr(reasonBadField, "__deleted: want a boolean, got %s", describe(v))
	}
	var id any
	if connectorKind(src) == KindMongo {
		row, id = plainDoc(row)
	}
	unavail := stripUnavailable(row)
	if typ, _ := schema["type"].(string); typ == "struct" {
		if err := convertRow(row, schema); err != nil {
			return event{}, decodeErr(reasonBadValue, "%v", err)
		}
	}
	if ev.op == OpDelete {
		ev.before, ev.ids[1] = row, id // rewrite mode carries the deleted row's last state
	} else {
		ev.after, ev.unavail, ev.ids[0] = row, unavail, id
	}
	return ev, nil
}
