package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/debeziumtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// The convergence property with metadata: after any history of text
// edits, metadata-only updates (a column the text does not render changes,
// which a declared field or a metadata column renders), updates of a column
// nothing renders, deletes and re-creates (some with the text the document
// had before its delete), delivered out of order across documents, with
// old events replayed later and neighbouring events of one document
// swapped, the index equals a fresh load of the final state: the same live
// documents with the same metadata and source rows, the same chunk hashes
// and texts in order, each vector its own text's embedding, and no chunk of
// a deleted document visible. Near-duplicate reuse is off: TestConvergence
// is about it.

const (
	mdSeeds   = 8
	mdChanges = 200
	mdDocs    = 16
)

// mdTables renders body as the text; status and lang are not rendered
// but reach the metadata (lang as a metadata column, both through declared
// fields); views reaches nothing but the stored row.
var mdTables = []pipeline.TableConfig{{
	Match: convTable, ID: []string{"id"}, Text: "{{body}}", Metadata: []string{"lang"},
	Fields: map[string]string{"semantic_tag": "{{status}}", "label": "{{status}}/{{lang}}"},
}}

var (
	mdStatuses = []string{"draft", "review", "published", "archived"}
	mdLangs    = []string{"en", "fr", "de"}
)

type mdDoc struct {
	paras         []string
	status, lang  string
	views         int
	live          bool
	deletedParas  []string // the text at the last delete, for re-creates
	everRecreated bool
}

func (d *mdDoc) row() map[string]any {
	return map[string]any{"body": strings.Join(d.paras, "\n\n"), "status": d.status, "lang": d.lang, "views": d.views}
}

// mdHistory generates one seed's changes to the model; versions are LSNs
// from one counter.
type mdHistory struct {
	*history
	docs map[int]*mdDoc
	// metaOnly counts the changes that leave the text as it was and change
	// the metadata of a live document.
	metaOnly int
}

func newMDHistory(seed uint64) *mdHistory {
	return &mdHistory{history: newHistory(seed ^ 0x3e7a), docs: map[int]*mdDoc{}}
}

func (h *mdHistory) event(op string, id int, d *mdDoc) cdc.Record {
	h.lsn += 8
	if op == "d" {
		return debeziumtest.Message("docs", op, id, h.lsn, nil)
	}
	return debeziumtest.Message("docs", op, id, h.lsn, d.row())
}

func (h *mdHistory) pick(xs []string) string { return xs[h.r.IntN(len(xs))] }

// other returns a value of xs other than cur.
func (h *mdHistory) other(xs []string, cur string) string {
	for {
		if v := h.pick(xs); v != cur {
			return v
		}
	}
}

func (h *mdHistory) next() change {
	id := h.r.IntN(mdDocs)
	d := h.docs[id]
	if d == nil || !d.live {
		nd := &mdDoc{status: h.pick(mdStatuses), lang: h.pick(mdLangs), live: true}
		switch {
		case d != nil && len(d.deletedParas) > 0 && h.r.IntN(2) == 0:
			// Re-created with the text it had when it was deleted: the
			// stored render hash matches, but the stored row is deleted.
			nd.paras = slices.Clone(d.deletedParas)
			nd.everRecreated = true
		default:
			for range 2 + h.r.IntN(4) {
				nd.paras = append(nd.paras, h.paragraph())
			}
		}
		h.docs[id] = nd
		return change{doc: id, msg: h.event("c", id, nd)}
	}
	switch k := h.r.IntN(100); {
	case k < 10:
		d.live = false
		d.deletedParas = slices.Clone(d.paras)
		return change{doc: id, msg: h.event("d", id, nil)}
	case k < 35:
		// Metadata only: the status, a declared field's column.
		d.status = h.other(mdStatuses, d.status)
		h.metaOnly++
	case k < 45:
		// Metadata only: lang, a metadata column and a field's column.
		d.lang = h.other(mdLangs, d.lang)
		h.metaOnly++
	case k < 52:
		// Nothing rendered changes: a new version of the row alone.
		d.views++
	case k < 60:
		// Text and metadata at once.
		d.paras = slices.Clone(d.paras)
		d.paras[h.r.IntN(len(d.paras))] = h.paragraph()
		d.status = h.other(mdStatuses, d.status)
	case k < 72:
		d.paras = slices.Insert(slices.Clone(d.paras), h.r.IntN(len(d.paras)+1), h.paragraph())
	case k < 80 && len(d.paras) > 1:
		p := h.r.IntN(len(d.paras))
		d.paras = slices.Delete(slices.Clone(d.paras), p, p+1)
	default:
		d.paras = slices.Clone(d.paras)
		d.paras[h.r.IntN(len(d.paras))] = h.paragraph()
	}
	return change{doc: id, msg: h.event("u", id, d)}
}

// mdDeliveries is history.deliveries (interleaved across documents,
// duplicates and replays of old events later on), and then some
// neighbouring events of one document swapped: the later one is applied
// first and the earlier one arrives stale.
func (h *mdHistory) mdDeliveries(cs []change) []cdc.Record {
	out := h.deliveries(cs)
	docOf := func(r cdc.Record) string { return string(r.Raw.Key) }
	for range len(out) / 10 {
		i := h.r.IntN(len(out))
		for j := i + 1; j < len(out); j++ {
			if docOf(out[j]) == docOf(out[i]) {
				out[i], out[j] = out[j], out[i]
				break
			}
		}
	}
	return out
}

// metaCounter counts the writes applied as metadata-only updates.
type metaCounter struct {
	pipeline.Index
	metadataOnly atomic.Int64
}

func (m *metaCounter) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	out, err := m.Index.Upsert(ctx, d)
	if err == nil && out.MetadataOnly {
		m.metadataOnly.Add(1)
	}
	return out, err
}

func mdRun(t *testing.T, st *sink.Store, msgs []cdc.Record, batch int) (pipeline.Snapshot, int64) {
	t.Helper()
	ch, err := chunker.New(chunker.Config{TargetTokens: 80, MinTokens: 20, MaxTokens: 200})
	require.NoError(t, err)
	src := batched(msgs, batch)
	idx := &metaCounter{Index: st}
	p, err := pipeline.New(pipeline.Config{Tables: mdTables, Workers: 4, RetryBackoff: 1, MaxRetryBackoff: 2, Reuse: pipeline.ReuseConfig{Disabled: true}},
		pipeline.Stages{Source: src, Splitter: ch, Target: pipeline.Target{Name: "docs", Index: idx, Embedder: &bowEmbedder{}}})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	return p.Stats(), idx.metadataOnly.Load()
}

type mdChunk struct {
	hash, text string
	vec        []float32
}

type mdState struct {
	metadata, row map[string]any
	renderHash    *string
	chunks        []mdChunk // as the index's view shows them
}

// mdIndexState reads the live documents and, through the index's view
// (what searches and SQL users read), their chunks; a document deleted in
// the index must have no chunk there.
func mdIndexState(t *testing.T, pool *pgxpool.Pool, schema string) map[string]*mdState {
	t.Helper()
	ctx := t.Context()
	q := func(s string) string { return pgx.Identifier{schema, s}.Sanitize() }
	out := map[string]*mdState{}
	rows, err := pool.Query(ctx, "SELECT id, metadata, row, render_hash FROM "+q("documents")+" WHERE index_name = 'mdconv' AND deleted_at IS NULL")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var md, row []byte
		s := &mdState{}
		require.NoError(t, rows.Scan(&id, &md, &row, &s.renderHash))
		require.NoError(t, json.Unmarshal(md, &s.metadata))
		require.NoError(t, json.Unmarshal(row, &s.row))
		out[id] = s
	}
	require.NoError(t, rows.Err())
	rows, err = pool.Query(ctx, "SELECT v.doc_id, c.content_hash, v.text, v.embedding FROM "+q(sink.IndexView("mdconv"))+" v"+
		" JOIN "+q("chunks")+" c ON c.id = v.id ORDER BY v.doc_id, v.position")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var c mdChunk
		var vec pgvector.Vector
		require.NoError(t, rows.Scan(&id, &c.hash, &c.text, &vec))
		c.vec = vec.Slice()
		s := out[id]
		require.NotNil(t, s, "%s: chunks visible for a document that is not live", id)
		s.chunks = append(s.chunks, c)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestMetadataConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	var mu sync.Mutex
	var metaOnlyChanges, metaOnlyWrites, stale, recreated int
	t.Cleanup(func() {
		t.Logf("over %d seeds: %d metadata-only changes generated, %d written as metadata-only updates, %d stale changes skipped, %d re-creates with the deleted text",
			mdSeeds, metaOnlyChanges, metaOnlyWrites, stale, recreated)
		if !t.Failed() {
			require.Positive(t, metaOnlyWrites, "the histories must exercise metadata-only updates")
			require.Positive(t, stale, "the histories must exercise replays")
			require.Positive(t, recreated, "the histories must re-create documents with their deleted text")
		}
	})
	for seed := range uint64(mdSeeds) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			t.Parallel()
			h := newMDHistory(seed)
			var cs []change
			for range mdChanges {
				cs = append(cs, h.next())
			}
			msgs := h.mdDeliveries(cs)

			replayed, rpool, rschema := convIndex(t, "mdconv")
			stats, writes := mdRun(t, replayed, msgs, 1+h.r.IntN(40))
			mu.Lock()
			metaOnlyChanges += h.metaOnly
			metaOnlyWrites += int(writes)
			stale += stats["stale"]
			for _, d := range h.docs {
				if d.everRecreated {
					recreated++
				}
			}
			mu.Unlock()

			// The fresh load: one snapshot read per live document of its
			// final row.
			var fresh []cdc.Record
			for id, d := range h.docs {
				if d.live {
					fresh = append(fresh, h.event("r", id, d))
				}
			}
			fstore, fpool, fschema := convIndex(t, "mdconv")
			mdRun(t, fstore, fresh, len(fresh)+1)

			got, want := mdIndexState(t, rpool, rschema), mdIndexState(t, fpool, fschema)
			require.ElementsMatch(t, keysOf(want), keysOf(got), "live documents")
			for id, w := range want {
				g := got[id]
				require.Equal(t, w.metadata, g.metadata, "%s: metadata", id)
				require.Equal(t, w.row, g.row, "%s: source row", id)
				require.Equal(t, w.renderHash, g.renderHash, "%s: render hash", id)
				require.Len(t, g.chunks, len(w.chunks), "%s: chunk count", id)
				for i := range w.chunks {
					require.Equal(t, w.chunks[i].hash, g.chunks[i].hash, "%s chunk %d: hash", id, i)
					require.Equal(t, w.chunks[i].text, g.chunks[i].text, "%s chunk %d: text", id, i)
					require.Equal(t, bow(g.chunks[i].text), g.chunks[i].vec, "%s chunk %d: its text's vector", id, i)
				}
			}
			// And the model agrees with the fresh load's metadata.
			for id, d := range h.docs {
				if !d.live {
					continue
				}
				w := want[sink.DocID(convTable, fmt.Sprint(id))]
				require.NotNil(t, w)
				require.Equal(t, map[string]any{"lang": d.lang, "semantic_tag": d.status, "label": d.status + "/" + d.lang}, w.metadata)
			}
		})
	}
}
