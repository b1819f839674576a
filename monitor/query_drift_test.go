package monitor_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/monitor"
)

var (
	opsWords  = strings.Fields("kubernetes pod node scheduler deploy rollout helm chart ingress service restart crash loop memory limit cpu quota namespace secret volume claim log tail metrics alert cluster upgrade drain taint")
	cookWords = strings.Fields("sourdough starter flour water knead proof oven crust crumb yeast salt butter dough loaf bake rye hydration levain fold shape score steam banneton")
)

// queries returns n questions of 3–5 words drawn from words.
func queries(rng *rand.Rand, words []string, n int) []string {
	out := make([]string, n)
	for i := range out {
		k := 3 + rng.IntN(3)
		ws := make([]string, k)
		for j := range ws {
			ws[j] = words[rng.IntN(len(words))]
		}
		out[i] = "how do I " + strings.Join(ws, " ")
	}
	return out
}

func queryAlarm(t *testing.T, st monitor.Status) (psi float64, alarm bool) {
	t.Helper()
	for _, e := range st.Events {
		if e.SemanticTag == monitor.TagQueryDrift && e.Signal.Method == "psi_max" {
			return e.Signal.Score, e.Signal.Exceeded
		}
	}
	return 0, false
}

// TestQueryDriftAgainstQueryReference: query drift compares front-door
// queries with the first queries (the query reference), not with chunks.
// A stationary stream gives no alarm over 20 disjoint windows even though
// the corpus is about something else (its distance is reported, never
// exceeded); a shifted stream alarms; a restart keeps the reference; and
// `monitor reference --reset --queries` pins the recent queries.
func TestQueryDriftAgainstQueryReference(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := ctxT(t)
	const n = 200 // query reference and window
	cfg := monitor.Config{SampleSize: -1, QueryReferenceSize: n, ReferenceSize: 50, WindowSize: 50}
	m := b.monitor(t, cfg)
	_, err := m.ResetQueryReference(ctx)
	require.ErrorContains(t, err, "only 0 recent front-door queries", "nothing to pin before any query")

	// The corpus is about baking; users ask about operations.
	for i := range 50 {
		b.upsert(t, fmt.Sprint("bake", i), 1, strings.Join(queries(rand.New(rand.NewPCG(uint64(i), 1)), cookWords, 1), " ")+" with a recipe")
	}
	tap := m.QueryTap(b.emb)
	rng := rand.New(rand.NewPCG(7, 14))
	ask := func(words []string, k int) {
		t.Helper()
		for k > 0 {
			batch := min(k, 100)
			_, err := tap.Embed(ctx, queries(rng, words, batch))
			require.NoError(t, err)
			k -= batch
		}
	}
	ask(opsWords, n) // the reference: the first n queries
	checks, alarms, worst := 0, 0, 0.0
	var corpus monitor.Signal
	for range 20 * n / 100 { // 20 windows' worth, a check every half window
		ask(opsWords, 100)
		st, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
		require.NoError(t, err)
		require.True(t, st.Query.Ready, "window of %d queries", st.Query.CurN)
		psi, alarm := queryAlarm(t, st)
		checks++
		worst = max(worst, psi)
		if alarm {
			alarms++
		}
		for _, e := range st.Events {
			if e.Signal.Method == "corpus_psi_max" {
				corpus = e.Signal
			}
		}
	}
	t.Logf("stationary queries: %d checks over 20 windows of %d, %d alarms, worst PSI %.3f; distance to the corpus: PSI %.2f", checks, n, alarms, worst, corpus.Score)
	require.Zero(t, alarms)
	require.Greater(t, corpus.Score, monitor.PSIMajor, "queries and chunks differ: compared with the corpus, this stream would read as drift")
	require.False(t, corpus.Exceeded, "the corpus distance is reported, never alarmed on")

	// The questions change subject: the alarm fires within a window.
	asked := 0
	for asked < 2*n {
		ask(cookWords, 25)
		asked += 25
		st, err := m.Check(ctx, monitor.CheckOptions{NoPublish: true})
		require.NoError(t, err)
		if _, alarm := queryAlarm(t, st); alarm {
			break
		}
	}
	require.Less(t, asked, 2*n, "shifted queries must raise the query drift alarm")
	t.Logf("shifted queries: alarm after %d queries (window %d)", asked, n)

	// A restart keeps the reference: the shifted window still alarms
	// against it at the first check (a rebuilt reference would be the
	// shifted queries themselves).
	ask(cookWords, n)
	_, err = m.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	b.reg = nil
	m2 := b.monitor(t, cfg)
	st, err := m2.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	require.Equal(t, n, st.Query.RefN)
	require.Equal(t, n, st.Query.CurN)
	_, alarm := queryAlarm(t, st)
	require.True(t, alarm, "the persisted reference is the operations queries")

	// Pinning the recent queries makes them the reference.
	pinned, err := m2.ResetQueryReference(ctx)
	require.NoError(t, err)
	require.Equal(t, n, pinned)
	m3 := b.monitor(t, cfg) // another process, as serve would be
	tap3 := m3.QueryTap(b.emb)
	for range 2 {
		_, err := tap3.Embed(ctx, queries(rng, cookWords, 100))
		require.NoError(t, err)
	}
	st, err = m3.Check(ctx, monitor.CheckOptions{NoPublish: true})
	require.NoError(t, err)
	psi, alarm := queryAlarm(t, st)
	require.False(t, alarm, "baking questions against a baking reference (PSI %.3f)", psi)
}
