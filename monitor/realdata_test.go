package monitor

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

type sharedSet struct {
	texts []string
	vecs  [][]float32
}

// The real-data tests share embedded sets: hashing 20,000 chunks is the
// slow part.
var (
	sharedMu    sync.Mutex
	sharedCache = map[string]sharedSet{}
)

// sharedChunks returns the chunk vectors (offline hashing embedder, 384
// dimensions) of the first snapshot ("r") bodies of a shared edit history,
// at most maxChunks, skipping when the shared data is absent.
func sharedChunks(t *testing.T, set string, maxChunks int) (texts []string, vecs [][]float32) {
	t.Helper()
	key := fmt.Sprint(set, maxChunks)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := sharedCache[key]; ok {
		return c.texts, slices.Clone(c.vecs)
	}
	defer func() {
		if len(vecs) > 0 {
			sharedCache[key] = sharedSet{texts, slices.Clone(vecs)}
		}
	}()
	if testing.Short() {
		t.Skip("reads the shared data; skipped with -short")
	}
	// ../shared beside the repository; a worktree sits one level deeper.
	path := filepath.Join("..", "..", "shared", "data", set, "events.jsonl.gz")
	if _, err := os.Stat(path); os.IsNotExist(err) {
		path = filepath.Join("..", "..", "..", "shared", "data", set, "events.jsonl.gz")
	}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		t.Skipf("shared data %s is absent", path)
	}
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	ch, err := chunker.New(chunker.Config{})
	require.NoError(t, err)
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() && len(texts) < maxChunks {
		var ev struct {
			Op   string  `json:"op"`
			Body *string `json:"body"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Op != "r" || ev.Body == nil {
			continue
		}
		for _, c := range ch.Split(*ev.Body) {
			texts = append(texts, c.Text)
		}
	}
	require.NoError(t, sc.Err())
	if len(texts) > maxChunks {
		texts = texts[:maxChunks]
	}
	vecs, err = embedder.NewHashing(384).Embed(context.Background(), texts)
	require.NoError(t, err)
	return texts, vecs
}
