package tests

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/openaitest"
)

// newTypedEnv is an env whose embedder is the fake OpenAI API at dims
// dimensions (its vectors are the hashing embedder's, so queries find
// their words), whose source is a file (the path returned) and whose
// index_type is vt ("" leaves it unset).
func newTypedEnv(t *testing.T, vt string, dims int) (*env, string) {
	e, events, _ := newTypedEnvServer(t, vt, dims)
	return e, events
}

// newTypedEnvServer is newTypedEnv with its fake embedding API, whose
// requests a test can count.
func newTypedEnvServer(t *testing.T, vt string, dims int) (*env, string, *openaitest.Server) {
	t.Helper()
	e := newEnv(t, "")
	srv := openaitest.New(t, openaitest.Options{Dimensions: dims})
	events := filepath.Join(e.dir, "events.jsonl")
	writeConfigSource(t, e, fmt.Sprintf("source:\n  kind: file\n  file:\n    path: %s\n", events))
	typ := ""
	if vt != "" {
		typ = "index_type: " + vt + "\n"
	}
	editConfig(t, e, "embedder:\n  provider: hashing\n  dimensions: 256\n", fmt.Sprintf(
		"embedder:\n  provider: openai\n  base_url: %s\n  model: text-embedding-3-large\n  dimensions: %d\n  api_key: sk-test\n  timeout: 10s\n  max_retries: 1\n%s",
		srv.URL, dims, typ))
	return e, events, srv
}

// listedIndex is one line of index list --json.
type listedIndex struct {
	Name       string `json:"name"`
	Dimensions int    `json:"dimensions"`
	Type       string `json:"type"`
	HNSW       struct {
		M              int `json:"m"`
		EfConstruction int `json:"ef_construction"`
		EfSearch       int `json:"ef_search"`
	} `json:"hnsw"`
	RerankCandidates int      `json:"rerank_candidates"`
	Documents        int64    `json:"documents"`
	State            string   `json:"state"`
	Aliases          []string `json:"aliases"`
}

func (e *env) indexes() map[string]listedIndex {
	e.t.Helper()
	out, _ := e.run(false, "index", "list", "--json")
	got := map[string]listedIndex{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var x listedIndex
		require.NoError(e.t, json.Unmarshal([]byte(line), &x), line)
		got[x.Name] = x
	}
	return got
}

// typedDocs are six articles on three subjects, two each.
func typedDocs() []string {
	var lines []string
	for i, s := range [][]string{kayak, kayak, espresso, espresso, glacier, glacier} {
		id := i + 1
		lines = append(lines, article{op: "c", id: id, lsn: int64(100 + id), title: fmt.Sprintf("Note %d", id), body: body(s[i%2], s[2]), tenant: "acme"}.line())
	}
	return lines
}

const quokka = "Quokka sanctuaries on the island keep the small marsupials away from the sandwiches of day visitors."

// editAndDelete appends an edit of document 1 (its kayak text becomes the
// quokka paragraph) and the delete of document 2 (the other kayak one).
func editAndDelete(lines []string) []string {
	return append(lines,
		article{op: "u", id: 1, lsn: 200, title: "Note 1", body: quokka, tenant: "acme"}.line(),
		article{op: "d", id: 2, lsn: 210}.line())
}

// requireFinds checks the index answers for its documents' subjects.
func requireFinds(t *testing.T, e *env, question string, ids ...string) hit {
	t.Helper()
	hits := e.query(question)
	require.NotEmpty(t, hits, question)
	require.Contains(t, ids, hits[0].DocID, "%q: %v", question, docIDs(hits))
	return hits[0]
}

// requireEdited checks the edit and the delete of editAndDelete: no hit
// holds a kayak text any more, document 2 is gone, document 1 answers with
// its new text.
func requireEdited(t *testing.T, e *env) {
	t.Helper()
	for _, h := range e.query("sea kayaking paddle and the wet exit") {
		require.NotEqual(t, "public.articles/2", h.DocID, "deleted document returned")
		require.NotContains(t, h.Text, "kayak", "the edited document's old text is still searchable")
	}
	top := requireFinds(t, e, "quokka sanctuaries on the island", "public.articles/1")
	require.Contains(t, top.Text, "Quokka")
}

// TestVectorTypesEndToEnd: an index of each type (vector, halfvec, bit)
// is built from a file by serve, answers queries, applies an edit and a
// delete, shows its type in index list and index status, and refuses a
// config that asks it to be another type, naming reindex.
func TestVectorTypesEndToEnd(t *testing.T) {
	t.Parallel() // each subtest has its own schema, files and fake API
	for _, vt := range []string{"vector", "halfvec", "bit"} {
		t.Run(vt, func(t *testing.T) {
			t.Parallel()
			e, events := newTypedEnv(t, vt, 256)
			lines := typedDocs()
			writeLines(t, events, lines...)
			stats := e.serveOnce()
			require.Equal(t, 6, stats["op_c"], "stats %v", stats)

			x := e.indexes()["articles"]
			require.Equal(t, vt, x.Type)
			require.Equal(t, 16, x.HNSW.M)
			require.Equal(t, 64, x.HNSW.EfConstruction)
			require.Equal(t, 40, x.HNSW.EfSearch)
			require.EqualValues(t, 6, x.Documents)
			out, _ := e.run(false, "index", "list")
			require.Regexp(t, `(?m)^NAME\s+MODEL\s+DIMENSIONS\s+TYPE\s+M\s+EF_CONSTRUCTION\s+EF_SEARCH\s`, out)
			require.Regexp(t, `(?m)^articles\s+text-embedding-3-large\s+256\s+`+vt+`\s+16\s+64\s+40\s`, out)
			out, _ = e.run(false, "index", "status")
			require.Contains(t, out, "type "+vt+", HNSW m 16, ef_construction 64, ef_search 40")

			requireFinds(t, e, "sea kayaking paddle and the wet exit", "public.articles/1", "public.articles/2")
			requireFinds(t, e, "espresso grind size and the dose", "public.articles/3", "public.articles/4")
			requireFinds(t, e, "glaciers crevasses and moraines", "public.articles/5", "public.articles/6")

			writeLines(t, events, editAndDelete(lines)...)
			stats = e.serveOnce()
			require.Equal(t, 1, stats["op_u"], "stats %v", stats)
			require.Equal(t, 1, stats["op_d"], "stats %v", stats)
			requireEdited(t, e)
			require.EqualValues(t, 5, e.indexes()["articles"].Documents)

			// The type is fixed: asking another for the existing index
			// is refused with the command that builds one.
			other := map[string]string{"vector": "halfvec", "halfvec": "bit", "bit": "vector"}[vt]
			editConfig(t, e, "index_type: "+vt+"\n", "index_type: "+other+"\n")
			out, err := e.run(true, "serve", "--once")
			require.Error(t, err)
			require.Contains(t, out, "ragsync reindex")
			require.Contains(t, out, "--index-type "+other)
		})
	}
}

// TestReindexAcrossVectorTypes: blue/green from a vector index to a
// halfvec one and from there to a bit one, with the config naming no
// type: reindex --index-type builds each (with its own HNSW m and
// ef_construction for the bit one), promote switches the alias, serve
// keeps applying changes through it, and rollback switches back.
func TestReindexAcrossVectorTypes(t *testing.T) {
	t.Parallel() // own schema, files and fake API
	e, events, srv := newTypedEnvServer(t, "", 256)
	lines := typedDocs()
	writeLines(t, events, lines...)
	e.serveOnce()
	require.Equal(t, "vector", e.indexes()["articles"].Type)

	// The model is the same: the new type's index takes every vector from
	// the embedding cache, which holds them at full precision.
	served := len(srv.Served())
	out, _ := e.run(false, "reindex", "--to", "articles_half", "--index-type", "halfvec")
	require.Equal(t, served, len(srv.Served()), "a type change embeds nothing")
	require.Contains(t, out, "(text-embedding-3-large, 256 dimensions, halfvec) started")
	require.Contains(t, out, "articles_half is caught up")
	xs := e.indexes()
	require.Equal(t, "halfvec", xs["articles_half"].Type)
	require.EqualValues(t, 6, xs["articles_half"].Documents)
	require.Equal(t, "vector", xs["articles"].Type, "the old index is untouched")
	e.run(false, "index", "promote", "articles_half")
	out, _ = e.run(false, "index", "status")
	require.Contains(t, out, "index articles_half (alias articles)")
	require.Contains(t, out, "type halfvec")
	requireFinds(t, e, "sea kayaking paddle and the wet exit", "public.articles/1", "public.articles/2")

	// serve writes through the alias into the halfvec index (and the
	// retired vector one).
	lines = editAndDelete(lines)
	writeLines(t, events, lines...)
	e.serveOnce()
	requireEdited(t, e)

	out, _ = e.run(false, "reindex", "--to", "articles_bit", "--index-type", "bit", "--hnsw-m", "8", "--hnsw-ef-construction", "32")
	require.Contains(t, out, "256 dimensions, bit) started")
	xs = e.indexes()
	bit := xs["articles_bit"]
	require.Equal(t, "bit", bit.Type)
	require.Equal(t, 8, bit.HNSW.M)
	require.Equal(t, 32, bit.HNSW.EfConstruction)
	require.EqualValues(t, 5, bit.Documents, "built from the halfvec index, with the edit and the delete")
	e.run(false, "index", "promote", "articles_bit")
	out, _ = e.run(false, "index", "status")
	require.Contains(t, out, "index articles_bit (alias articles)")
	require.Contains(t, out, "type bit, HNSW m 8, ef_construction 32")
	requireEdited(t, e)

	lines = append(lines, article{op: "c", id: 9, lsn: 300, title: "Note 9", body: "Lighthouse keepers logged the fog signal hours in a leather book.", tenant: "acme"}.line())
	writeLines(t, events, lines...)
	e.serveOnce()
	requireFinds(t, e, "lighthouse keepers fog signal", "public.articles/9")

	out, _ = e.run(false, "index", "rollback")
	require.Contains(t, out, "alias articles -> articles_half")
	out, _ = e.run(false, "index", "status")
	require.Contains(t, out, "type halfvec")
	requireFinds(t, e, "lighthouse keepers fog signal", "public.articles/9")
	requireEdited(t, e)
}

// fidelityResult is fidelity check --json.
type fidelityResult struct {
	Breach bool `json:"breach"`
	Events []struct {
		Signal struct {
			Method  string  `json:"method"`
			Score   float64 `json:"score"`
			Storage *struct {
				VectorType string  `json:"vector_type"`
				P50        float64 `json:"p50"`
				Max        float64 `json:"max"`
				Note       string  `json:"note"`
			} `json:"storage"`
		} `json:"signal"`
	} `json:"events"`
	Aggregates []struct {
		Kind string  `json:"kind"`
		N    int     `json:"n"`
		Max  float64 `json:"max"`
	} `json:"aggregates"`
}

// TestLargeModelVectorTypes: a 3,072-dimension model (text-embedding-3-large's
// size) is refused by the default type with the settings that fit, and
// indexes, searches, re-indexes (halfvec to bit, bit to halfvec) and
// passes the monitor's fidelity check as halfvec and as bit, the check
// reporting the storage's own error.
func TestLargeModelVectorTypes(t *testing.T) {
	t.Parallel() // each subtest has its own schema, files and fake API
	t.Run("vector refused", func(t *testing.T) {
		t.Parallel()
		e, events := newTypedEnv(t, "", 3072)
		writeLines(t, events, typedDocs()...)
		out, err := e.run(true, "serve", "--once")
		require.Error(t, err)
		require.Contains(t, out, "embedder.dimensions: 3072 is more than index_type vector allows (2000): set index_type: halfvec (up to 4000) or bit (up to 16000)")
	})
	for _, tc := range []struct{ vt, to string }{{"halfvec", "bit"}, {"bit", "halfvec"}} {
		t.Run(tc.vt, func(t *testing.T) {
			t.Parallel()
			e, events := newTypedEnv(t, tc.vt, 3072)
			writeLines(t, events, typedDocs()...)
			e.serveOnce()
			x := e.indexes()["articles"]
			require.Equal(t, tc.vt, x.Type)
			require.Equal(t, 3072, x.Dimensions)
			requireFinds(t, e, "sea kayaking paddle and the wet exit", "public.articles/1", "public.articles/2")
			requireFinds(t, e, "glaciers crevasses and moraines", "public.articles/5", "public.articles/6")

			e.run(false, "monitor", "baseline")
			out, _ := e.run(false, "fidelity", "check", "--sample", "8", "--json")
			var res fidelityResult
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])), &res), out)
			require.False(t, res.Breach, out)
			methods := map[string]bool{}
			for _, ev := range res.Events {
				methods[ev.Signal.Method] = true
				if ev.Signal.Method != "canary_p50_cosine" && ev.Signal.Method != "uniform_share_over_bound" {
					require.Nil(t, ev.Signal.Storage, ev.Signal.Method) // the reuse debt measures no vector
					continue
				}
				s := ev.Signal.Storage
				require.NotNil(t, s, "%s carries the storage's error", ev.Signal.Method)
				require.Equal(t, tc.vt, s.VectorType)
				if tc.vt == "halfvec" {
					require.Positive(t, s.P50)
					require.Less(t, s.Max, 1e-5)
				} else {
					require.Zero(t, s.Max)
					require.Contains(t, s.Note, "recall")
				}
				if ev.Signal.Method == "canary_p50_cosine" {
					require.InDelta(t, s.P50, ev.Signal.Score, 1e-9, "an unchanged model: the canary score is the storage's part")
				}
			}
			require.True(t, methods["canary_p50_cosine"] && methods["uniform_share_over_bound"], "both fidelity signals: %s", out)
			measured := 0
			for _, a := range res.Aggregates {
				if a.Kind != "canary" {
					measured += a.N
					if tc.vt == "bit" {
						require.Zero(t, a.Max, "a bit index stores the full vector")
					} else if a.N > 0 {
						// Rounded, so within the half-precision error; a
						// sample of short texts can hold only vectors
						// that half precision represents exactly (0 up to
						// float error): the canary's positive P50 above
						// shows the rounding.
						require.Less(t, math.Abs(a.Max), 1e-5, "%s: a halfvec index's stored vectors read back rounded", a.Kind)
					}
				}
			}
			require.Positive(t, measured, "stored 3,072-dimension vectors were read and measured")
			out, _ = e.run(false, "monitor")
			require.Contains(t, out, "canary_p50_cosine storage ("+tc.vt+")", "monitor prints the storage's part")
			out, _ = e.run(false, "fidelity", "check", "--sample", "4")
			require.Contains(t, out, "uniform_share_over_bound storage ("+tc.vt+")", "fidelity check prints it too")

			to := "articles_" + tc.to
			out, _ = e.run(false, "reindex", "--to", to, "--index-type", tc.to)
			require.Contains(t, out, "3072 dimensions, "+tc.to+") started")
			require.Equal(t, tc.to, e.indexes()[to].Type)
			e.run(false, "index", "promote", to)
			requireFinds(t, e, "sea kayaking paddle and the wet exit", "public.articles/1", "public.articles/2")
			out, _ = e.run(false, "index", "status")
			require.Contains(t, out, "index "+to+" (alias articles)")
		})
	}
}
