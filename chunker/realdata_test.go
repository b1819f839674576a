package chunker_test

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
)

// editEvent is one line of /work/shared/data/edits-*/events.jsonl.gz.
type editEvent struct {
	DocID string  `json:"doc_id"`
	Op    string  `json:"op"`
	Body  *string `json:"body"`
}

// replayUpdates calls fn with the previous and new text of the first
// maxUpdates "u" events of a shared edit history, skipping when the shared
// data is absent.
func replayUpdates(t *testing.T, set string, maxUpdates int, fn func(before, after string)) {
	t.Helper()
	if testing.Short() {
		t.Skip("replays real edit history; skipped with -short")
	}
	path := filepath.Join("..", "..", "shared", "data", set, "events.jsonl.gz")
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skipf("shared data %s is absent", path)
	}
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	docs := map[string]string{}
	updates := 0
	for sc.Scan() && updates < maxUpdates {
		var ev editEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		switch {
		case ev.Op == "d" || ev.Body == nil:
			delete(docs, ev.DocID)
		case ev.Op == "u":
			if prev, ok := docs[ev.DocID]; ok {
				fn(prev, *ev.Body)
				updates++
			}
			docs[ev.DocID] = *ev.Body
		default:
			docs[ev.DocID] = *ev.Body
		}
	}
	require.NoError(t, sc.Err())
	require.Positive(t, updates)
}

// TestRealEditHistory replays real edits of long Markdown documents
// (kubernetes/community) and counts how many chunk hashes of the old
// version survive in the new one: those chunks need no re-embedding.
func TestRealEditHistory(t *testing.T) {
	t.Parallel()
	cfg := chunker.Config{}
	cdc, greedy := mustNew(t, cfg), mustNew(t, withStrategy(cfg, "greedy"))
	var keptC, totalC, keptG, totalG, docs int
	updates := 150
	if raceEnabled {
		updates = 10
	}
	replayUpdates(t, "edits-C", updates, func(before, after string) {
		docs++
		b, a := cdc.Split(before), cdc.Split(after)
		checkInvariants(t, cdc, cfg, after, a)
		keptC, totalC = keptC+survivors(b, a), totalC+len(a)
		b, a = greedy.Split(before), greedy.Split(after)
		keptG, totalG = keptG+survivors(b, a), totalG+len(a)
	})
	fc, fg := float64(keptC)/float64(totalC), float64(keptG)/float64(totalG)
	t.Logf("%d updates: chunks reused content-defined %d/%d (%.3f), greedy %d/%d (%.3f)",
		docs, keptC, totalC, fc, keptG, totalG, fg)
	require.Greater(t, fc, 0.5)
	if raceEnabled {
		return // too few updates for a stable comparison
	}
	require.GreaterOrEqual(t, fc, fg-0.03, "content-defined must not reuse fewer chunks than greedy")
}
