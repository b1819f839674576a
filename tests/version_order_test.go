package tests

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
)

// The version-order property: whatever the interleaving of
// streamed Postgres changes (with an LSN), position-less changes (no LSN:
// ordered by commit time only), snapshot reads with and without a position
// (an initial snapshot at the snapshot's LSN, an incremental snapshot) and
// replays of any of them, the index converges to the last committed state
// of every document: its text, or its absence. When versions compared as text one
// position-less change froze a document ("pg" < "ts") and two in one
// millisecond lost the second.

const (
	orderSeeds  = 20
	orderDocs   = 4
	orderEvents = 30 // per document
)

// orderEvent is one message of a document's history.
type orderEvent struct {
	doc  int
	msg  cdc.Record
	desc string
}

// orderHistory generates one document's committed history and the reads
// taken along it. The clock (ms) and the LSN only move forward, and a
// position-less change gets a millisecond of its own: at equal time a
// position outranks it by rule (see docs/ordering.md), which a source
// without positions cannot be protected from.
type orderHistory struct {
	r     *rand.Rand
	table string
	ms    uint64
	lsn   uint64
	body  map[int]*string // nil: deleted / never created
	gen   int
}

func (h *orderHistory) event(doc int, op string, body *string, src map[string]any) orderEvent {
	src["schema"], src["table"] = "public", h.table
	p := map[string]any{"op": op, "source": src}
	row := map[string]any{"id": doc}
	if body != nil {
		row["body"] = *body
	}
	if op == "d" {
		p["before"] = row
	} else {
		p["after"] = row
	}
	v, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	desc := fmt.Sprintf("%s doc%d %v", op, doc, src)
	if body != nil {
		desc += " " + (*body)[:min(len(*body), 27)]
	}
	return orderEvent{doc: doc, desc: desc, msg: cdc.Record{Raw: cdc.Raw{Topic: "db.public." + h.table, Key: fmt.Appendf(nil, `{"id":%d}`, doc), Value: v}}}
}

// next commits one change to doc, or takes one snapshot read of it.
func (h *orderHistory) next(doc int) orderEvent {
	// Time moves by 0–2 ms: changes and reads often share a millisecond.
	h.ms += uint64(h.r.IntN(3))
	cur := h.body[doc]
	switch k := h.r.IntN(10); {
	case k < 3 && cur != nil:
		// A snapshot read sees the committed state now.
		body := *cur
		if h.r.IntN(2) == 0 {
			return h.event(doc, "r", &body, map[string]any{"connector": "postgresql", "lsn": h.lsn, "ts_ms": h.ms, "snapshot": "true"})
		}
		// An incremental snapshot read without a position.
		return h.event(doc, "r", &body, map[string]any{"connector": "postgresql", "ts_ms": h.ms, "snapshot": "incremental"})
	case k < 6:
		// A position-less change: a millisecond of its own. The source's
		// log still moves (the event just does not say where to), so a
		// snapshot read after it is at a later position.
		h.ms++
		h.lsn += 8
		op, body := h.change(doc)
		ev := h.event(doc, op, body, map[string]any{"connector": "postgresql", "ts_ms": h.ms})
		h.ms++
		return ev
	default:
		h.lsn += 8
		op, body := h.change(doc)
		return h.event(doc, op, body, map[string]any{"connector": "postgresql", "lsn": h.lsn, "ts_ms": h.ms})
	}
}

// change commits a create, an update or a delete of doc to the model.
func (h *orderHistory) change(doc int) (string, *string) {
	cur := h.body[doc]
	if cur != nil && h.r.IntN(6) == 0 {
		h.body[doc] = nil
		return "d", nil
	}
	h.gen++
	body := fmt.Sprintf("document %d, generation %d: %s", doc, h.gen, strings5(h.r))
	op := "u"
	if cur == nil {
		op = "c"
	}
	h.body[doc] = &body
	return op, &body
}

func strings5(r *rand.Rand) string {
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	out := ""
	for range 5 {
		out += words[r.IntN(len(words))] + " "
	}
	return out
}

func TestVersionOrderConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	st, pool, schema := convIndex(t, "conv")
	var stale int
	for seed := range uint64(orderSeeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			h := &orderHistory{r: rand.New(rand.NewPCG(seed, 10)), table: fmt.Sprintf("vo%d", seed),
				ms: 1700000000000, lsn: 1000, body: map[int]*string{}}
			var evs []orderEvent
			for range orderEvents * orderDocs {
				evs = append(evs, h.next(h.r.IntN(orderDocs)))
			}
			// Any interleaving: a full shuffle, then replays of random
			// events at random later places.
			h.r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			for range len(evs) / 4 {
				evs = slices.Insert(evs, h.r.IntN(len(evs)+1), evs[h.r.IntN(len(evs))])
			}
			msgs := make([]cdc.Record, len(evs))
			for i, e := range evs {
				msgs[i] = e.msg
				msgs[i].Offset = int64(i + 1)
			}
			stats := runPipeline(t, st, msgs, 1+h.r.IntN(30))
			stale += stats["stale"]

			rows, err := pool.Query(t.Context(), fmt.Sprintf("SELECT doc_key, row->>'body' FROM %s.documents"+
				" WHERE source_table = $1 AND deleted_at IS NULL", schema), "public."+h.table)
			require.NoError(t, err)
			got := map[string]string{}
			for rows.Next() {
				var k, b string
				require.NoError(t, rows.Scan(&k, &b))
				got[k] = b
			}
			require.NoError(t, rows.Err())
			want := map[string]string{}
			for doc, b := range h.body {
				if b != nil {
					want[fmt.Sprint(doc)] = *b
				}
			}
			if !assert.Equal(t, want, got, "the last committed state of every document") {
				for _, e := range evs {
					t.Log(e.desc)
				}
			}
		})
	}
	require.Positive(t, stale, "the interleavings must deliver changes out of order")
}
