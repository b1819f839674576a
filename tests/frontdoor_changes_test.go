package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// TestServeFrontDoorKeepsReuseAndDropsDeletes runs serve with the front door
// on:
//   - near-duplicate reuse and edit measurement still work: the front door's
//     sink wrapper once hid the store's StoredChunks, so an edit was never
//     measured (edit_similarity stayed NULL) with frontdoor.enabled;
//   - a delete and a move to another tenant leave the front door's answers
//     long before cache_ttl (1h here), through the generation bump serve's
//     wrapper makes after the sink commits.
func TestServeFrontDoorKeepsReuseAndDropsDeletes(t *testing.T) {
	e := newEnv(t, "")
	events := filepath.Join(e.dir, "events.jsonl")
	writeLines(t, events,
		article{op: "c", id: 1, lsn: 100, title: "Kayaking", body: body(kayak...), tenant: "acme"}.line(),
		article{op: "c", id: 2, lsn: 110, title: "Espresso", body: body(espresso...), tenant: "acme"}.line(),
		article{op: "c", id: 3, lsn: 120, title: "Glaciers", body: body(glacier...), tenant: "acme"}.line(),
	)
	_, _ = startFrontDoorServe(t, e, events, "e2e", "  cache_ttl: 1h\n  stale_ttl: 2h\n", "")
	viaRedis := func(text string) string {
		o, _ := e.run(true, "query", "--via", "redis", "--timeout", "5s", "--tenant", "acme", text)
		return o
	}
	require.Eventually(t, func() bool {
		return strings.Contains(viaRedis("espresso grind size"), "public.articles/2") &&
			strings.Contains(viaRedis("glacier crevasses moraines"), "public.articles/3")
	}, 60*time.Second, 300*time.Millisecond)
	require.Contains(t, viaRedis("espresso grind size"), "cached true")
	require.Contains(t, viaRedis("glacier crevasses moraines"), "cached true")

	// An edit of 1, a delete of 2, and 3 moved to globex.
	edited := append([]string{}, kayak...)
	edited[1] = "Practise the wet exit and the paddle float rescue in calm water before any open crossing."
	f, err := os.OpenFile(events, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	for _, a := range []article{
		{op: "u", id: 1, lsn: 200, title: "Kayaking", body: body(edited...), tenant: "acme"},
		{op: "d", id: 2, lsn: 210},
		{op: "u", id: 3, lsn: 220, title: "Glaciers", body: body(glacier...), tenant: "globex"},
	} {
		_, err = f.WriteString(a.line() + "\n")
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())

	var out string
	require.Eventually(t, func() bool {
		out = viaRedis("espresso grind size") + viaRedis("glacier crevasses moraines")
		return !strings.Contains(out, "public.articles/2") && !strings.Contains(out, "public.articles/3")
	}, 60*time.Second, 300*time.Millisecond, "deleted or moved document still answered: %s", out)

	// The edit was measured: reuse was not switched off by the front door.
	require.Eventually(t, func() bool {
		conn, err := pgx.Connect(context.Background(), pgtest.URL())
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var sim *int16
		err = conn.QueryRow(context.Background(), "SELECT edit_similarity FROM "+e.schema+".documents WHERE id = 'public.articles/1'").Scan(&sim)
		require.NoError(t, err)
		return sim != nil
	}, 30*time.Second, 200*time.Millisecond, "edit_similarity is NULL: the pipeline did not see the store's chunks")
}
