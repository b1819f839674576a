package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/internal/pgtest"
)

// writeSet writes evs as <dir>/<set>/events.jsonl.gz.
func writeSet(t *testing.T, dir, set string, evs []event) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, set), 0o755))
	f, err := os.Create(filepath.Join(dir, set, "events.jsonl.gz"))
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	for _, e := range evs {
		require.NoError(t, enc.Encode(e))
	}
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
}

func smallConfig(dir string) config {
	return config{
		DataDir: dir, PostgresURL: pgtest.URL(), TargetTokens: 470, Dimensions: 32,
		Model: "text-embedding-3-small", Queries: 10, Seed: 1, Workers: 2,
		RagsyncRefine: chunker.SuggestedRefineTargetTokens,
	}
}

// TestRunSetSmall runs the whole benchmark on a tiny history against the
// real Postgres and the counting server.
func TestRunSetSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Postgres")
	}
	long := func(word string, n int) string {
		return strings.TrimSpace(strings.Repeat("The "+word+" service keeps the index in sync with every edit. ", n))
	}
	a1 := "# Alpha\n\n" + long("alpha", 40) + "\n\n" + long("beta", 40)
	a2 := "# Alpha\n\n" + long("alpha", 40) + "\n\n" + long("gamma", 40)
	b1 := "# Bravo\n\n" + long("delta", 30)
	c1 := "# Charlie\n\n" + long("alpha", 40)
	evs := []event{
		{Seq: 1, Commit: "base", TS: "2024-01-01T00:00:00Z", DocID: "a.md", Op: "r", Body: &a1},
		{Seq: 2, Commit: "base", TS: "2024-01-01T00:00:00Z", DocID: "b.md", Op: "r", Body: &b1},
		{Seq: 3, Commit: "c1", TS: "2024-01-02T00:00:00Z", DocID: "a.md", Op: "u", Body: &a2},
		{Seq: 4, Commit: "c2", TS: "2024-01-03T00:00:00Z", DocID: "b.md", Op: "d"},
		{Seq: 5, Commit: "c2", TS: "2024-01-03T00:00:00Z", DocID: "c.md", Op: "c", Body: &c1},
	}
	dir := t.TempDir()
	writeSet(t, dir, "tiny", evs)

	res, err := runSet(t.Context(), smallConfig(dir), "tiny")
	require.NoError(t, err)

	require.Equal(t, 5, res.Events)
	require.Equal(t, 2, res.InitialEvents)
	ini, upd := res.Phases[0], res.Phases[1]
	require.Equal(t, chunker.CountTokens(a1)+chunker.CountTokens(b1), ini.W)
	require.Equal(t, chunker.CountTokens(a2)+chunker.CountTokens(c1), upd.W)
	require.Equal(t, 1, upd.Deletes)
	// Everything is new at first; the server counted what the client sent.
	require.Positive(t, ini.Ragsync.Tokens)
	require.Equal(t, int64(ini.RagsyncCounted), ini.Ragsync.Tokens)
	require.Equal(t, int64(upd.RagsyncCounted), upd.Ragsync.Tokens)
	// The update re-embeds at most the changed part, not whole documents.
	require.Positive(t, upd.Ragsync.Tokens)
	require.Less(t, upd.Ragsync.Tokens, int64(upd.W))
	require.Equal(t, 2, upd.Pipeline["op_u"]+upd.Pipeline["op_c"])
	// The split by op covers every token sent: the snapshot's are all r;
	// the edit of a.md (u, one paragraph of ~40 changed words in ~480) is
	// embedded: its predicted distance is past the monitor's bound (and it
	// brings a new word), and the chunk it changed is refined into fine
	// pieces, two distinct ones (the paragraph repeats one sentence); the
	// new c.md (c), whose title makes its only chunk new, pays for that
	// chunk, which a create does not refine.
	require.Equal(t, map[string]*ragOpCounts{"r": {Versions: 2, Tokens: ini.RagsyncCounted, ChunksEmbedded: ini.RagsyncEmbedded.Count}}, ini.RagsyncByOp)
	require.Equal(t, []string{"c", "u"}, slices.Sorted(maps.Keys(upd.RagsyncByOp)))
	require.Equal(t, 1, upd.RagsyncByOp["u"].Versions)
	require.Equal(t, 1, upd.RagsyncByOp["c"].Versions)
	require.Equal(t, 2, upd.RagsyncByOp["u"].ChunksEmbedded)
	require.Zero(t, upd.RagsyncByOp["u"].ChunksReused)
	require.Positive(t, upd.RagsyncByOp["u"].Tokens)
	require.Equal(t, 1, upd.RagsyncByOp["c"].ChunksEmbedded)
	require.Positive(t, upd.RagsyncByOp["c"].Tokens)
	require.Equal(t, upd.RagsyncCounted, upd.RagsyncByOp["u"].Tokens+upd.RagsyncByOp["c"].Tokens)
	var printed strings.Builder
	res.print(&printed)
	require.Contains(t, printed.String(), "updates by op:")
	require.NotContains(t, printed.String(), "could not be attributed")
	require.NotContains(t, printed.String(), "add up to")

	require.True(t, res.Convergence.Pass, res.Convergence.String())
	require.Equal(t, 1, res.Convergence.Refined, "the fresh load holds the edited chunk whole, the replay refined")
	require.NotNil(t, res.Debt)
	require.Zero(t, res.Debt.FinalPastBound, "every stored vector within the bound after the window")
	require.Zero(t, res.Debt.FinalDebt)
	require.Positive(t, res.Debt.FinalChunks)
	require.Contains(t, printed.String(), "reuse debt (reuse true, repayment")
	require.Equal(t, 2, res.Convergence.Documents)
	require.Equal(t, 10, res.Recall.Queries)
	require.Greater(t, res.Recall.Ragsync, 0.0)

	// Every schema the run created is gone.
	require.Len(t, res.Schemas, 3)
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname = ANY($1)", res.Schemas).Scan(&n))
	require.Zero(t, n)

	path := filepath.Join(t.TempDir(), "results-tiny.json")
	require.NoError(t, res.writeJSON(path))
	var back map[string]any
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, "tiny", back["set"])
}

func TestRunSetFailures(t *testing.T) {
	dir := t.TempDir()
	body := "text"
	tests := []struct {
		name    string
		evs     []event
		set     string
		cfg     func(c *config)
		wantErr string
	}{
		{name: "missing set", set: "nope", wantErr: "open events"},
		{
			name:    "snapshot after updates",
			set:     "late-snapshot",
			evs:     []event{{Seq: 1, TS: "2024-01-01T00:00:00Z", DocID: "a", Op: "c", Body: &body}, {Seq: 2, TS: "2024-01-01T00:00:00Z", DocID: "b", Op: "r", Body: &body}},
			wantErr: "snapshot read after the first update",
		},
		{
			name: "Postgres unreachable",
			set:  "ok",
			evs:  []event{{Seq: 1, TS: "2024-01-01T00:00:00Z", DocID: "a", Op: "r", Body: &body}},
			cfg: func(c *config) {
				c.PostgresURL = "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
			},
			wantErr: "connect postgres",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.evs != nil {
				writeSet(t, dir, tc.set, tc.evs)
			}
			cfg := smallConfig(dir)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			_, err := runSet(t.Context(), cfg, tc.set)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
