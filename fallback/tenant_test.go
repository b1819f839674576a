package fallback

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/sink"
)

// TestMissingTenantIsRefusedOnATenantIndex: the seeded index holds the
// documents of two tenants; a request without a tenant is refused with a
// reason naming the field, never answered across tenants, and a request
// with one gets only that tenant's documents.
func TestMissingTenantIsRefusedOnATenantIndex(t *testing.T) {
	b := setupTenants(t, nil)
	run(t, b.fd)
	_, err := b.search(t, Query{Text: "Bloom filters reject unknown tenants", K: 10})
	var rerr *ReplyError
	require.True(t, errors.As(err, &rerr), "refused, not answered: %v", err)
	require.Equal(t, "invalid request: tenant: required: this index holds documents of tenants, and an answer without one would mix them; send the tenant field", rerr.Reason)

	res, err := b.search(t, Query{Text: "Bloom filters reject unknown tenants", K: 10, Tenant: "acme"})
	require.NoError(t, err)
	require.NotEmpty(t, res.Hits)
	for _, h := range res.Hits {
		require.Contains(t, []string{"public.articles/1", "public.articles/2"}, h.DocID, "only acme's documents")
	}
}

// TestIndexWithoutTenantsAnswersWithoutTenant: an index none of whose
// documents has a tenant keeps answering requests that name none.
func TestIndexWithoutTenantsAnswersWithoutTenant(t *testing.T) {
	b := setup(t, nil)
	pool, schema := pgtest.Schema(t)
	st := newStore(t, pool, schema)
	doc := sink.Document{Table: testTable, Key: "9", Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}, SourceTS: time.Now(),
		Chunks: []sink.Chunk{{Position: 0, Hash: "9-0", Text: "Shared handbook for everyone", Tokens: 4, Vector: embedText("Shared handbook for everyone")}}}
	_, err := st.Upsert(t.Context(), doc)
	require.NoError(t, err)
	b.fd.SetTarget("shared", b.emb, st)
	run(t, b.fd)
	res, err := b.search(t, Query{Text: "shared handbook", K: 3})
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Status)
	require.Len(t, res.Hits, 1)
	require.Equal(t, "public.articles/9", res.Hits[0].DocID)
}
