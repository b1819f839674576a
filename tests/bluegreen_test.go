package tests

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestBlueGreenReindex proves a re-index under load. A writer keeps
// appending changes (updates, deletes, re-creates) to the file serve
// follows while `reindex` builds articles_v2 (64 dimensions) beside
// articles (256), then `index promote` moves the alias, then `index
// rollback` moves it back. Queries run throughout, through the front door
// and through the CLI: none fails, and every answer's hits come from one
// index only — told apart by their scores, which only one of the two
// models (dimensions) explains. After promotion the front door and the CLI
// answer from articles_v2, after the rollback from articles; at the end
// both indexes hold every document at its final version with the same
// chunks, articles_v2 with its own model's vectors.
func TestBlueGreenReindex(t *testing.T) {
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	const docs = 40
	subjects := [][]string{kayak, espresso, glacier}
	text := func(id int, rev int64) string {
		s := subjects[id%3]
		return body(s[int(rev)%3], fmt.Sprintf("Revision r%d of note %d.", rev, id))
	}
	var lines []string
	for id := 1; id <= docs; id++ {
		lines = append(lines, article{op: "c", id: id, lsn: int64(id), title: fmt.Sprintf("Note %d", id), body: text(id, int64(id)), tenant: "acme"}.line())
	}
	writeLines(t, events, lines...)
	// Near-duplicate reuse off: a reused vector belongs to another text,
	// and the model check below recomputes each hit's score from its text.
	_, logs := startFrontDoorServe(t, e, events, "bg", "  workers: 2\n", "index_poll: 200ms\nreuse:\n  enabled: false\n")
	require.Eventually(t, func() bool {
		o, err := e.run(true, "query", "--tenant", "acme", "sea kayaking paddle")
		return err == nil && strings.Contains(o, "public.articles/")
	}, 60*time.Second, 300*time.Millisecond)

	// The writer: one change every 25 ms, its final state per document.
	type final struct {
		lsn     int64
		deleted bool
	}
	var (
		mu      sync.Mutex
		finals  = map[int]final{}
		stopW   = make(chan struct{})
		writerD = make(chan struct{})
	)
	for id := 1; id <= docs; id++ {
		finals[id] = final{lsn: int64(id)}
	}
	f, err := os.OpenFile(events, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	go func() {
		defer close(writerD)
		defer f.Close()
		for lsn := int64(1000); ; lsn += 10 {
			select {
			case <-stopW:
				return
			case <-time.After(25 * time.Millisecond):
			}
			id := 1 + randN(docs)
			mu.Lock()
			fin := finals[id]
			a := article{op: "u", id: id, lsn: lsn, title: fmt.Sprintf("Note %d", id), body: text(id, lsn), tenant: "acme"}
			switch {
			case fin.deleted:
				a.op = "c"
			case randN(8) == 0:
				a = article{op: "d", id: id, lsn: lsn}
			}
			finals[id] = final{lsn: lsn, deleted: a.op == "d"}
			mu.Unlock()
			if _, err := f.WriteString(a.line() + "\n"); err != nil {
				return
			}
		}
	}()

	// The queriers: the same question through the front door and the CLI.
	const question = "sea kayaking paddle and marine forecast"
	type tally struct{ failed, mixed, small, large atomic.Int64 }
	var viaRedis, viaCLI tally
	var failures sync.Map
	stopQ := make(chan struct{})
	var qwg sync.WaitGroup
	small, large := embedder.NewHashing(64), embedder.NewHashing(256)
	qsmall, _ := small.Embed(context.Background(), []string{question})
	qlarge, _ := large.Embed(context.Background(), []string{question})
	// model says which index's vectors explain every hit's score: 64, 256,
	// 0 for both (ambiguous, consistent), -1 for neither (a mix).
	model := func(hits []bgHit) int {
		okSmall, okLarge := true, true
		for _, h := range hits {
			vs, _ := small.Embed(context.Background(), []string{h.Text})
			vl, _ := large.Embed(context.Background(), []string{h.Text})
			okSmall = okSmall && math.Abs(cosine(qsmall[0], vs[0])-h.Score) < 1e-3
			okLarge = okLarge && math.Abs(cosine(qlarge[0], vl[0])-h.Score) < 1e-3
		}
		switch {
		case okSmall && okLarge:
			return 0
		case okSmall:
			return 64
		case okLarge:
			return 256
		}
		return -1
	}
	// The check can fail: hits scored by different models are a mix.
	scored := func(e *embedder.Hashing, q []float32, text string) bgHit {
		v, _ := e.Embed(context.Background(), []string{text})
		return bgHit{Text: text, Score: cosine(q, v[0])}
	}
	require.Equal(t, 64, model([]bgHit{scored(small, qsmall[0], kayak[0]), scored(small, qsmall[0], kayak[1])}))
	require.Equal(t, 256, model([]bgHit{scored(large, qlarge[0], kayak[0]), scored(large, qlarge[0], kayak[1])}))
	require.Equal(t, -1, model([]bgHit{scored(small, qsmall[0], kayak[0]), scored(large, qlarge[0], kayak[1])}))
	ask := func(tl *tally, args ...string) {
		defer qwg.Done()
		for {
			select {
			case <-stopQ:
				return
			default:
			}
			out, err := e.runQuiet(append([]string{"query", "--json", "-k", "4", "--tenant", "acme"}, append(args, question)...)...)
			if err != nil {
				tl.failed.Add(1)
				failures.Store(out, err.Error())
				continue
			}
			hits := parseHits(t, out)
			switch model(hits) {
			case -1:
				tl.mixed.Add(1)
				failures.Store(out, "mixed")
			case 64:
				tl.small.Add(1)
			case 256:
				tl.large.Add(1)
			}
		}
	}
	qwg.Add(2)
	go ask(&viaRedis, "--via", "redis", "--timeout", "20s")
	go ask(&viaCLI)

	// Build articles_v2 while changes keep arriving.
	out, err := e.run(false, "reindex", "--to", "articles_v2", "--dimensions", "64")
	require.NoError(t, err, out)
	require.Contains(t, out, "serve dual-writes articles_v2 since", "the running serve picked the new index up")
	require.Contains(t, out, "articles_v2 is caught up")

	out, err = e.run(false, "index", "promote", "articles_v2")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return viaRedis.small.Load() > 2 && viaCLI.small.Load() > 2 }, 90*time.Second, 200*time.Millisecond,
		"answers from articles_v2 after the promote")
	largeBefore := viaRedis.large.Load()
	// The retired index is still the running serve's own: not droppable.
	out, err = e.run(true, "index", "drop", "articles")
	require.Error(t, err)
	require.Contains(t, out, "a running serve writes to it")

	out, err = e.run(false, "index", "rollback")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return viaRedis.large.Load() > largeBefore+2 }, 90*time.Second, 200*time.Millisecond,
		"answers from articles again after the rollback")

	close(stopW)
	<-writerD
	close(stopQ)
	qwg.Wait()
	failures.Range(func(k, v any) bool { t.Logf("query failure (%v): %s", v, k); return true })
	for name, tl := range map[string]*tally{"front door": &viaRedis, "cli": &viaCLI} {
		t.Logf("%s: %d answers from articles, %d from articles_v2, %d failed, %d mixed", name, tl.large.Load(), tl.small.Load(), tl.failed.Load(), tl.mixed.Load())
		require.Zero(t, tl.failed.Load(), "%s: queries never fail", name)
		require.Zero(t, tl.mixed.Load(), "%s: no answer mixes indexes", name)
		require.Positive(t, tl.large.Load(), name)
		require.Positive(t, tl.small.Load(), name)
	}

	// Every live document is in both indexes at its final version, with
	// the same chunks; articles_v2's vectors are its own model's.
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	defer pool.Close()
	state := func(index string) map[int]string {
		rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT d.id, d.deleted_at IS NOT NULL, coalesce(d.row->>'body', ''),
			coalesce(string_agg(c.content_hash, ',' ORDER BY c.position), ''), coalesce(max(vector_dims(c.embedding)), 0)
			FROM %[1]s.documents d LEFT JOIN %[1]s.chunks c ON c.index_name = d.index_name AND c.doc_id = d.id
			WHERE d.index_name = $1 GROUP BY 1, 2, 3`, e.schema), index)
		require.NoError(t, err)
		out := map[int]string{}
		for rows.Next() {
			var key, body, hashes string
			var deleted bool
			var dims int
			require.NoError(t, rows.Scan(&key, &deleted, &body, &hashes, &dims))
			id, err := strconv.Atoi(strings.TrimPrefix(key, "public.articles/"))
			require.NoError(t, err, key)
			if deleted {
				out[id] = "deleted"
				continue
			}
			out[id] = fmt.Sprintf("%s | %s | %d", body, hashes, dims)
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := func() map[int]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[int]string{}
		for id, fin := range finals {
			if fin.deleted {
				out[id] = "deleted"
			} else {
				out[id] = text(id, fin.lsn)
			}
		}
		return out
	}
	bodies := func(st map[int]string) map[int]string {
		out := map[int]string{}
		for id, s := range st {
			out[id], _, _ = strings.Cut(s, " | ")
		}
		return out
	}
	// The writer stopped; serve applies the tail of the file.
	require.Eventually(t, func() bool {
		return fmt.Sprint(bodies(state("articles"))) == fmt.Sprint(want()) && fmt.Sprint(bodies(state("articles_v2"))) == fmt.Sprint(want())
	}, 60*time.Second, 300*time.Millisecond, "both indexes reach every document's final version")
	old, next := state("articles"), state("articles_v2")
	for id, s := range old {
		if s == "deleted" {
			require.Equal(t, s, next[id])
			continue
		}
		require.Equal(t, strings.Replace(s, "| 256", "| 64", 1), next[id], "document %d: same chunks, the new model's vectors", id)
	}

	// The retired articles_v2 can go; serve stops writing it and goes on.
	out, err = e.run(false, "index", "drop", "articles_v2")
	require.NoError(t, err, out)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"shadows":[]`) }, 30*time.Second, 200*time.Millisecond)
	out, err = e.run(false, "query", "--via", "redis", "--tenant", "acme", "--json", question)
	require.NoError(t, err, out)
	hits := parseHits(t, out)
	require.NotEmpty(t, hits)
	require.Equal(t, 256, model(hits), "answered from articles")
}

// syncBuffer is a strings.Builder safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type bgHit struct {
	DocID string  `json:"doc_id"`
	Score float64 `json:"score"`
	Text  string  `json:"text"`
}

func parseHits(t *testing.T, out string) []bgHit {
	var hits []bgHit
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var h bgHit
		require.NoError(t, json.Unmarshal([]byte(line), &h), line)
		hits = append(hits, h)
	}
	return hits
}

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}

func randN(n int) int {
	v, _ := rand.Int(rand.Reader, big.NewInt(int64(n)))
	return int(v.Int64())
}

// runQuiet runs ragsync with the env's config and returns stdout (stderr on
// failure), without logging: the queriers run hundreds of times.
func (e *env) runQuiet(args ...string) (string, error) {
	cmd := ragsyncCmd(append(args, "--config", e.cfg)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// TestBackfillWritesTheFamily: a backfill into an index that another index
// follows (after `reindex`) writes both, as serve's changes do.
func TestBackfillWritesTheFamily(t *testing.T) {
	e := newEnv(t, "")
	srcURL := sourceDatabase(t, e.schema+"_src", `CREATE TABLE public.articles (id int PRIMARY KEY, title text, body text, tenant text, tags text);
		INSERT INTO public.articles VALUES
		(1, 'Tea', 'Green tea steeps at eighty degrees for two minutes; black tea takes boiling water.', 'acme', NULL),
		(2, 'Bread', 'A sourdough starter wants flour and water every day, and a warm kitchen.', 'acme', NULL)`)
	backfill := func() {
		out, err := e.run(false, "backfill", "--source-url", srcURL, "--table", "public.articles", "--progress", "none")
		require.NoError(t, err, out)
	}
	backfill()
	out, err := e.run(false, "reindex", "--to", "articles_v2", "--dimensions", "64")
	require.NoError(t, err, out)
	conn, err := pgx.Connect(context.Background(), srcURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), `UPDATE public.articles SET body = 'Oolong sits between green and black tea.' WHERE id = 1;
		INSERT INTO public.articles VALUES (3, 'Kayak', 'A sea kayak wants a paddle sized to your height.', 'acme', NULL)`)
	require.NoError(t, err)
	backfill()

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	defer pool.Close()
	docs := func(index string) map[string]string {
		rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT d.id, d.version, coalesce(string_agg(c.content_hash, ',' ORDER BY c.position), '')
			FROM %[1]s.documents d LEFT JOIN %[1]s.chunks c ON c.index_name = d.index_name AND c.doc_id = d.id
			WHERE d.index_name = $1 GROUP BY 1, 2`, e.schema), index)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var id, v, h string
			require.NoError(t, rows.Scan(&id, &v, &h))
			out[id] = v + " " + h
		}
		require.NoError(t, rows.Err())
		return out
	}
	old := docs("articles")
	require.Len(t, old, 3)
	require.Equal(t, old, docs("articles_v2"))
}
