package cdc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// TableConfig says how to identify documents of the tables it matches.
type TableConfig struct {
	// Match is the Debezium source "schema.table" (MongoDB "db.collection").
	// It may be a path.Match pattern; "*" matches any table. An exact match
	// wins over patterns; among patterns the first in order wins.
	Match string
	// ID lists the document id columns, looked up in After, else Before.
	// Defaults to the message key's fields.
	ID []string
}

// DecoderConfig configures a Decoder.
type DecoderConfig struct {
	// Tables maps tables to their id columns. Defaults to none: every
	// document key comes from the message key.
	Tables []TableConfig
	// Moves are the recorded moves of sources whose name stays when their
	// server changes (a Debezium connector pointed at a restored or
	// upgraded database keeps its server name and database): a version of
	// Source committed at or after At is of the next epoch, so it wins
	// over every version of the server before, whatever the positions.
	// Defaults to none.
	Moves []SourceMove
	// Schemas decodes keys and values in a schema registry's wire format
	// (Avro, Protobuf, JSON Schema), told apart from JSON by their first
	// byte. Nil reads JSON only: a framed value is a decode error whose
	// reason names source.kafka.registry.url.
	Schemas SchemaDecoder
}

// SourceMove is one move of a source: from At on, its changes come from a
// server whose positions restarted.
type SourceMove struct {
	Source string
	At     time.Time
}

// Validate reports every problem of c at once, each naming its field and
// the fix. NewDecoder does not call it: a pattern that does not parse just
// never matches, so the CLI should call Validate at start-up.
func (c DecoderConfig) Validate() error {
	var errs []error
	for i, t := range c.Tables {
		if t.Match == "" {
			errs = append(errs, fmt.Errorf("tables[%d].match: must not be empty, set it to schema.table or \"*\"", i))
		} else if _, err := path.Match(t.Match, ""); err != nil {
			errs = append(errs, fmt.Errorf("tables[%d].match: %q is not a valid pattern: %w", i, t.Match, err))
		}
		for j, col := range t.ID {
			if col == "" {
				errs = append(errs, fmt.Errorf("tables[%d].id[%d]: must not be empty, set it to a column name", i, j))
			}
		}
	}
	return errors.Join(errs...)
}

// Decoder turns Debezium messages into Changes. It holds no mutable state,
// so one Decoder is safe for concurrent use by any number of goroutines.
type Decoder struct {
	tables []TableConfig
	moves  map[string][]int64 // source → move times in ms, ascending
	// schemas decodes registry-framed keys and values; nil reads JSON only.
	schemas SchemaDecoder
}

// NewDecoder returns a Decoder for cfg. It copies cfg, so later changes to
// the caller's slices do not affect it.
func NewDecoder(cfg DecoderConfig) *Decoder {
	d := &Decoder{tables: make([]TableConfig, len(cfg.Tables)), schemas: cfg.Schemas}
	for i, t := range cfg.Tables {
		d.tables[i] = TableConfig{Match: t.Match, ID: slices.Clone(t.ID)}
	}
	for _, m := range cfg.Moves {
		if d.moves == nil {
			d.moves = map[string][]int64{}
		}
		d.moves[m.Source] = append(d.moves[m.Source], m.At.UnixMilli())
	}
	for _, ts := range d.moves {
		slices.Sort(ts)
	}
	return d
}

// epoch is how many recorded moves of source happened at or before ms.
func (d *Decoder) epoch(source string, ms uint64) uint32 {
	var n uint32
	for _, at := range d.moves[source] {
		if at <= int64(ms) {
			n++
		}
	}
	return n
}

// idColumns returns the configured id columns of table, or nil.
func (d *Decoder) idColumns(table string) []string {
	t, _ := LookupTable(d.tables, table)
	return t.ID
}

// Decode decodes one message.
//
// It returns a *SkipError (errors.Is(err, ErrSkip)) for messages that are
// not row changes: tombstones, transaction BEGIN/END, schema changes and
// heartbeats. It returns a *DecodeError for anything malformed; it never
// panics, whatever the input.
//
// A change with Op u and a nil After means "the row is not known in full":
// a MongoDB oplog update that only carries a $set/$unset patch, or a change
// stream update without the full document. Callers keep the stored row.
// (A patch without update operators replaces the whole document, and is
// returned as After.) Op m (a logical decoding message) is returned with
// whatever table and version it has; it carries no key and no rows.
func (d *Decoder) Decode(m Record) (Change, error) {
	return d.DecodeContext(context.Background(), m)
}

// DecodeContext is Decode with a context for the schema registry's
// requests: with a SchemaDecoder configured (DecoderConfig.Schemas), a
// registry-framed key or value is decoded through it, and a registry that
// cannot be reached returns an error that errors.Is ErrRegistryUnavailable
// (transient: retry the record, never dead-letter it) instead of a
// DecodeError.
func (d *Decoder) DecodeContext(ctx context.Context, m Record) (Change, error) {
	coord := Coord{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	fail := func(reason string, err error) (Change, error) {
		return Change{}, &DecodeError{Coord: coord, Reason: reason, Err: err}
	}
	if isNullJSON(m.Value) {
		return Change{}, &SkipError{Reason: SkipTombstone}
	}
	// Heartbeats go to their own topic (heartbeat.topics.prefix, default
	// "__debezium-heartbeat"); they never carry a row.
	if strings.HasPrefix(m.Topic, "__debezium-heartbeat") {
		return Change{}, &SkipError{Reason: SkipHeartbeat}
	}
	var payload, schema map[string]any
	if d.schemas != nil && IsFramed(m.Value) {
		var err error
		payload, schema, err = d.framedValue(ctx, m)
		if err != nil {
			var de *DecodeError
			if errors.As(err, &de) {
				de.Coord = coord
			}
			return Change{}, err
		}
	} else if IsFramed(m.Value) {
		return fail(reasonFramedNoRegistry, fmt.Errorf("schema id %d", binary.BigEndian.Uint32(m.Value[1:5])))
	} else {
		v, err := parseJSON(m.Value)
		if err != nil {
			if errors.Is(err, errTooDeep) {
				return fail(reasonTooDeep, err)
			}
			if errors.Is(err, errBadUTF8) || errors.Is(err, errLoneSurrogate) {
				return fail(reasonBadText, err)
			}
			return fail(reasonNotJSON, err)
		}
		top, ok := v.(map[string]any)
		if !ok {
			return fail(reasonNotObject, fmt.Errorf("got %s", describe(v)))
		}
		payload = top
		if isConnectEnvelope(top) {
			if top["payload"] == nil {
				// An old JsonConverter rendered tombstones as
				// {"schema":null,"payload":null}.
				return Change{}, &SkipError{Reason: SkipTombstone}
			}
			if payload, ok = top["payload"].(map[string]any); !ok {
				return fail(reasonPayload, fmt.Errorf("got %s", describe(top["payload"])))
			}
			schema, _ = top["schema"].(map[string]any)
		}
	}
	schemaName, _ := schema["name"].(string)
	if reason := skipReason(payload, schemaName); reason != "" {
		return Change{}, &SkipError{Reason: reason}
	}

	var ev event
	var err error
	if isEnvelope(payload, schemaName) {
		ev, err = envelopeEvent(payload, schema)
	} else {
		ev, err = flattenedEvent(payload, schema)
	}
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			de.Coord = coord
			return Change{}, de
		}
		return fail(reasonBadField, err)
	}
	return d.change(ctx, m, coord, ev)
}

// event is what the envelope and flattened readers agree on.
type event struct {
	op      Op
	src     map[string]any // source block (synthesised for flattened rows)
	payload map[string]any // envelope fields (ts_ms, transaction)
	before  map[string]any
	after   map[string]any
	filter  map[string]any // MongoDB oplog filter: holds _id when no row does
	unavail []string
	// ids are the MongoDB _id of after, before and filter as sent, before
	// plainExt turned an ObjectId into a plain string (see documentKey).
	ids [3]any
}

func (d *Decoder) change(ctx context.Context, m Record, coord Coord, ev event) (Change, error) {
	fail := func(reason string, err error) (Change, error) {
		return Change{}, &DecodeError{Coord: coord, Reason: reason, Err: err}
	}
	kind := connectorKind(ev.src)
	ch := Change{
		Op:          ev.op,
		Table:       tableName(ev.src, kind, m.Topic),
		Before:      ev.before,
		After:       ev.after,
		Unavailable: ev.unavail,
		TxID:        txID(ev.src, ev.payload),
		TraceParent: traceParent(m.Headers),
		Coord:       coord,
	}
	snapshot, err := snapshotFlag(ev.src)
	if err != nil {
		return fail(reasonBadField, err)
	}
	ts, err := sourceTime(ev.src, ev.payload)
	if err != nil {
		return fail(reasonBadField, err)
	}
	ch.Version, err = sourceVersion(ev.src, ev.payload, kind)
	ch.Version.Source = debeziumSource(ev.src)
	// The commit time and the snapshot flag travel with the version, their
	// only copy: they order it against versions of other kinds (see
	// Version).
	if ch.Version.TS == 0 {
		ch.Version.TS = VersionTS(ts)
	}
	ch.Version.Snapshot = ch.Version.Snapshot || snapshot
	if ch.Version.Source != "" && len(d.moves) > 0 {
		ch.Version.Epoch = d.epoch(ch.Version.Source, VersionTS(ts))
	}
	switch {
	case ev.op == OpMessage:
		// Messages are counted and skipped downstream; a missing table or
		// version is no reason to dead-letter them.
		return ch, nil
	case errors.Is(err, errNoVersion):
		return fail(reasonNoVersion, nil)
	case err != nil:
		return fail(reasonBadField, err)
	case ch.Table == "":
		return fail(reasonNoTable, nil)
	case ev.op == OpTruncate:
		return ch, nil // a truncate has no key: it is every document
	}
	ch.DocKey, ch.Key, err = d.documentKey(ctx, m.Topic, ch.Table, kind == KindMongo, []map[string]any{ev.after, ev.before, ev.filter}, ev.ids[:], m.Key)
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			de.Coord = coord
			return Change{}, de
		}
		if errors.Is(err, ErrRegistryUnavailable) {
			return Change{}, err
		}
		return fail(reasonBadKey, err)
	}
	return ch, nil
}

// isConnectEnvelope reports JsonConverter's schemas.enable=true wrapping:
// exactly the two fields "schema" and "payload".
func isConnectEnvelope(top map[string]any) bool {
	if len(top) != 2 {
		return false
	}
	_, s := top["schema"]
	_, p := top["payload"]
	return s && p
}

// skipReason recognises the non-row messages Debezium writes: heartbeats
// ({ts_ms} only), transaction metadata (status BEGIN/END) and schema-change
// events (ddl, tableChanges, or the legacy historyRecord). Each is checked by
// the fields its schema requires, so that a flattened row with a "status"
// column is not mistaken for a transaction.
func skipReason(p map[string]any, schemaName string) string {
	_, hasOp := p["op"]
	has := func(k string) bool { _, ok := p[k]; return ok }
	switch {
	case strings.HasSuffix(schemaName, ".Heartbeat"):
		return SkipHeartbeat
	case len(p) == 1 && has("ts_ms"):
		return SkipHeartbeat
	case strings.HasSuffix(schemaName, "TransactionMetadataValue"):
		return SkipTransaction
	case !hasOp && isTxStatus(p["status"]) && has("id") && (has("event_count") || has("data_collections")):
		return SkipTransaction
	case strings.HasSuffix(schemaName, "SchemaChangeValue"):
		return SkipSchemaChange
	case !hasOp && (has("ddl") || has("tableChanges") || has("historyRecord")):
		return SkipSchemaChange
	}
	return ""
}

func isTxStatus(v any) bool {
	s, _ := v.(string)
	return s == "BEGIN" || s == "END"
}

// isEnvelope tells a Debezium envelope from a row flattened by
// ExtractNewRecordState: an envelope has an op next to a source block, a row
// image or a message, or (malformed, missing its op) both row images or a
// source block that looks like one; its Connect schema is named
// "….Envelope". A flattened row may well have a "source" column, so a bare
// "source" field is not enough.
func isEnvelope(p map[string]any, schemaName string) bool {
	has := func(k string) bool { _, ok := p[k]; return ok }
	switch {
	case strings.HasSuffix(schemaName, ".Envelope"):
		return true
	case has("op"):
		return has("source") || has("after") || has("before") || has("message") || has("transaction") || has("patch") || has("filter")
	case has("before") && has("after"):
		return true
	}
	src, ok := p["source"].(map[string]any)
	if !ok {
		return false
	}
	_, conn := src["connector"]
	_, ts := src["ts_ms"]
	return conn || (ts && connectorKind(src) != "")
}

func traceParent(hs []Header) string {
	for _, h := range hs {
		if strings.EqualFold(h.Key, "traceparent") {
			return string(h.Value)
		}
	}
	return ""
}
