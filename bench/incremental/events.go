package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
)

// event is one line of an edits-* events.jsonl (see the data set's README):
// a document's full text after one real commit.
type event struct {
	Seq    int64   `json:"seq"`
	Commit string  `json:"commit"`
	TS     string  `json:"ts"`
	DocID  string  `json:"doc_id"`
	Op     string  `json:"op"` // r (base snapshot), c, u, d
	Body   *string `json:"body"`
}

// sampleDocs keeps the events of a fixed share of the documents, chosen by
// a hash of the doc_id, so a history can be scaled down without changing
// its shape: every kept document keeps its whole history, in order.
// fraction ≥ 1 (or ≤ 0) keeps everything.
func sampleDocs(evs []event, fraction float64) []event {
	if fraction <= 0 || fraction >= 1 {
		return evs
	}
	limit := uint64(fraction * (1 << 32))
	var out []event
	for _, e := range evs {
		h := fnv.New64a()
		h.Write([]byte(e.DocID))
		if h.Sum64()>>32 < limit {
			out = append(out, e)
		}
	}
	return out
}

// initial reports whether e belongs to the base snapshot (the initial load)
// rather than to the updates that follow it.
func (e event) initial() bool { return e.Op == "r" }

// readEvents reads a gzipped events file, at most limit events (0: all).
func readEvents(path string, limit int) ([]event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open events: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return decodeEvents(zr, limit)
}

func decodeEvents(r io.Reader, limit int) ([]event, error) {
	sc := bufio.NewScanner(r)
	// Bodies go up to 200 KiB, escaped in JSON: allow 4 MiB a line.
	sc.Buffer(make([]byte, 0, 1<<20), 4<<20)
	var evs []event
	for sc.Scan() {
		if limit > 0 && len(evs) >= limit {
			break
		}
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("decode event line %d: %w", len(evs)+1, err)
		}
		switch e.Op {
		case "r", "c", "u":
			if e.Body == nil {
				return nil, fmt.Errorf("event %d (%s %s): no body", e.Seq, e.Op, e.DocID)
			}
		case "d":
		default:
			return nil, fmt.Errorf("event %d: unknown op %q", e.Seq, e.Op)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return evs, nil
}

// Where the synthetic Debezium messages say they come from. The pipeline
// renders document text with the template "{{body}}" for this table.
const (
	benchTopic  = "bench.public.docs"
	benchTable  = "public.docs"
	benchSchema = "public"
	benchTbl    = "docs"
)

// dbzSource is Debezium's PostgreSQL source block (the fields the decoder
// and a reader would look at).
type dbzSource struct {
	Version   string `json:"version"`
	Connector string `json:"connector"`
	Name      string `json:"name"`
	TSMs      int64  `json:"ts_ms"`
	Snapshot  string `json:"snapshot"`
	DB        string `json:"db"`
	Schema    string `json:"schema"`
	Table     string `json:"table"`
	TxID      int64  `json:"txId"`
	LSN       uint64 `json:"lsn"`
}

type dbzValue struct {
	Before      map[string]any `json:"before"`
	After       map[string]any `json:"after"`
	Source      dbzSource      `json:"source"`
	Op          string         `json:"op"`
	TSMs        int64          `json:"ts_ms"`
	Transaction any            `json:"transaction"`
}

// wireLine is the {"topic","key","value"} line shape the file source reads.
type wireLine struct {
	Topic  string          `json:"topic"`
	Offset int64           `json:"offset"`
	Key    json.RawMessage `json:"key"`
	Value  json.RawMessage `json:"value"`
}

// lsnStep spaces the synthetic LSNs like real WAL records (bytes apart).
const lsnStep = 4096

// toLines turns events into Debezium PostgreSQL change messages as the
// payload-only JsonConverter writes them (schemas.enable=false): key
// {"id":…}, value the envelope with source.lsn strictly increasing in event
// order. A delete is followed by its tombstone, as Debezium does by default
// (tombstones.on.delete). Each event's commit becomes one transaction id.
//
// first is the index of evs[0] in the whole history, so that a history
// replayed in parts keeps increasing LSNs (and offsets) across the parts.
func toLines(evs []event, first int) ([][]byte, error) {
	lines := make([][]byte, 0, len(evs)+len(evs)/16)
	var txID int64
	prevCommit := ""
	offset := int64(2 * first)
	for i, e := range evs {
		if e.Commit != prevCommit || txID == 0 {
			txID = int64(1000 + first + i)
			prevCommit = e.Commit
		}
		ts, err := time.Parse(time.RFC3339, e.TS)
		if err != nil {
			return nil, fmt.Errorf("event %d: ts: %w", e.Seq, err)
		}
		key, err := json.Marshal(map[string]any{"id": e.DocID})
		if err != nil {
			return nil, err
		}
		v := dbzValue{
			Source: dbzSource{
				Version: "2.7.3.Final", Connector: "postgresql", Name: "bench",
				TSMs: ts.UnixMilli(), Snapshot: "false", DB: "docs",
				Schema: benchSchema, Table: benchTbl, TxID: txID,
				LSN: uint64(first+i+1) * lsnStep,
			},
			Op:   e.Op,
			TSMs: ts.UnixMilli(),
		}
		if e.Op == "r" {
			v.Source.Snapshot = "true"
			if i+1 == len(evs) || !evs[i+1].initial() {
				v.Source.Snapshot = "last"
			}
		}
		if e.Op == "d" {
			// REPLICA IDENTITY DEFAULT: the before image holds the key only.
			v.Before = map[string]any{"id": e.DocID, "body": nil}
		} else {
			v.After = map[string]any{"id": e.DocID, "body": *e.Body}
		}
		val, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		offset++
		line, err := json.Marshal(wireLine{Topic: benchTopic, Offset: offset, Key: key, Value: val})
		if err != nil {
			return nil, err
		}
		lines = append(lines, line)
		if e.Op == "d" {
			offset++
			tomb, err := json.Marshal(wireLine{Topic: benchTopic, Offset: offset, Key: key, Value: json.RawMessage("null")})
			if err != nil {
				return nil, err
			}
			lines = append(lines, tomb)
		}
	}
	return lines, nil
}

// memSource hands lines to the pipeline in batches, parsed exactly as the
// JSONL file source parses them (file.ParseLine).
type memSource struct {
	lines [][]byte
	next  int
	batch int
	dec   *cdc.Decoder // decodes as a file source does, as it hands over
}

func newMemSource(lines [][]byte, batch int) *memSource {
	return &memSource{lines: lines, batch: batch, dec: cdc.NewDecoder(cdc.DecoderConfig{})}
}

func (s *memSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	if err := ctx.Err(); err != nil {
		return cdc.Batch{}, err
	}
	if s.next >= len(s.lines) {
		return cdc.Batch{}, io.EOF
	}
	end := min(s.next+s.batch, len(s.lines))
	msgs := make([]cdc.Record, 0, end-s.next)
	for i := s.next; i < end; i++ {
		msgs = append(msgs, cdc.Decode(s.dec, file.ParseLine(s.lines[i], int64(i+1))))
	}
	s.next = end
	return cdc.Batch{Records: msgs, Ack: func(context.Context) error { return nil }}, nil
}

// finalState returns the text of every document alive after evs, by id.
func finalState(evs []event) map[string]string {
	docs := map[string]string{}
	for _, e := range evs {
		if e.Op == "d" {
			delete(docs, e.DocID)
			continue
		}
		docs[e.DocID] = *e.Body
	}
	return docs
}

// snapshotEvents renders a document set as a base snapshot (op r), ids
// sorted, so a fresh index can be loaded from it.
func snapshotEvents(docs map[string]string, ids []string) []event {
	evs := make([]event, 0, len(ids))
	for i, id := range ids {
		body := docs[id]
		evs = append(evs, event{Seq: int64(i + 1), Commit: "final", TS: "2026-01-01T00:00:00Z", DocID: id, Op: "r", Body: &body})
	}
	return evs
}
