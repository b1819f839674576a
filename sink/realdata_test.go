package sink_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// editEvent is one line of /work/shared/data/edits-A/events.jsonl.gz.
type editEvent struct {
	Seq   uint64  `json:"seq"`
	TS    string  `json:"ts"`
	DocID string  `json:"doc_id"`
	Op    string  `json:"op"`
	Body  *string `json:"body"`
}

// loadEdits reads a deterministic sample (1 in 200 documents) of the tldr
// edit history, or skips when the shared data is absent.
func loadEdits(t *testing.T) []editEvent {
	t.Helper()
	path := filepath.Join("..", "..", "shared", "data", "edits-A", "events.jsonl.gz")
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skip("shared data absent: " + path)
	}
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []editEvent
	for sc.Scan() {
		var e editEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		h := fnv.New32a()
		_, _ = h.Write([]byte(e.DocID))
		if h.Sum32()%200 == 0 {
			out = append(out, e)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// paragraphs stands in for the chunker: blank-line separated paragraphs,
// hashed with SHA-256.
func paragraphs(body string) []sink.Chunk {
	var out []sink.Chunk
	for _, p := range strings.Split(body, "\n\n") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		sum := sha256.Sum256([]byte(p))
		out = append(out, sink.Chunk{Position: len(out), Hash: hex.EncodeToString(sum[:]), Text: p, Tokens: len(strings.Fields(p))})
	}
	return out
}

// apply fills vectors like the pipeline would: only for hashes the
// store does not know yet, counting how many it had to "embed".
func apply(t *testing.T, s *sink.Store, e editEvent, embedded map[string]bool) sink.Outcome {
	t.Helper()
	ctx := context.Background()
	ts, err := time.Parse(time.RFC3339, e.TS)
	require.NoError(t, err)
	if e.Op == "d" {
		out, err := s.Delete(ctx, "tldr", e.DocID, ver(e.Seq), ts)
		require.NoError(t, err)
		return out
	}
	cs := paragraphs(*e.Body)
	hashes := make([]string, len(cs))
	for i, c := range cs {
		hashes[i] = c.Hash
	}
	known, err := s.Vectors(ctx, hashes)
	require.NoError(t, err)
	for i := range cs {
		if _, ok := known[cs[i].Hash]; !ok {
			cs[i].Vector = vecFor(cs[i].Hash)
			embedded[cs[i].Hash] = true
		}
	}
	out, err := s.Upsert(ctx, sink.Document{Table: "tldr", Key: e.DocID, Version: ver(e.Seq), SourceTS: ts, Chunks: cs})
	require.NoError(t, err)
	return out
}

func snapshot(t *testing.T, s *sink.Store, ids map[string]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for id := range ids {
		d, ok, err := s.Document(context.Background(), sink.DocID("tldr", id))
		require.NoError(t, err)
		require.True(t, ok, id)
		if d.Deleted {
			// A deleted document's chunks are hidden and kept for a
			// later undelete; which ones depends on arrival order.
			out[id] = d.Version.String() + " deleted"
			continue
		}
		out[id] = d.Version.String() + " " + strings.Join(d.Hashes, ",")
	}
	return out
}

// TestRealEditHistory replays real edits in order, then again (all no-ops),
// then shuffled into a second index, and requires the same final index.
func TestRealEditHistory(t *testing.T) {
	t.Parallel()
	events := loadEdits(t)
	require.NotEmpty(t, events)
	s, b := setup(t)
	ctx := context.Background()

	ids := map[string]bool{}
	embedded := map[string]bool{}
	var applied int
	for _, e := range events {
		ids[e.DocID] = true
		if apply(t, s, e, embedded).Applied {
			applied++
		}
	}
	require.Equal(t, len(events), applied, "every event is newer than the last")
	inOrder := snapshot(t, s, ids)

	// Rule 3: each distinct paragraph embedded once, however often it was
	// edited around; the cache holds exactly those.
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(embedded)), st.CacheEntries)

	// Rule 2: a replay changes nothing.
	for _, e := range events {
		out := apply(t, s, e, embedded)
		require.False(t, out.Applied, "seq %d replayed", e.Seq)
	}
	require.Equal(t, inOrder, snapshot(t, s, ids))

	// Any arrival order converges to the same index (versions fence).
	shuffled, err := sink.OpenIndex(ctx, b.pool, sink.Config{Mode: sink.Write, Create: true, Schema: b.schema, Index: "shuffled", Model: "test-model", Dimensions: dims})
	require.NoError(t, err)
	perm := append([]editEvent(nil), events...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	for _, e := range perm {
		apply(t, shuffled, e, embedded)
	}
	require.Equal(t, inOrder, snapshot(t, shuffled, ids))
	t.Logf("%d events over %d documents, %d distinct paragraphs embedded", len(events), len(ids), len(embedded))
}
