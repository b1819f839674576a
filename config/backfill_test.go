package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/config"
)

// TestBackfillTakesServesKeysAndMoves: a backfilled table is keyed by the
// tables[] entry that selects it, as serve keys its changes (an exact match
// first, else the first pattern), and its versions know the recorded moves
// of the sources they may name.
func TestBackfillTakesServesKeysAndMoves(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var c config.Config
	c.Source.Postgres.URL = "postgres://db/app"
	c.Source.Moves = []config.SourceMoveConfig{{Source: "dbz:shop/app", At: at}}
	c.Tables = []config.TableConfig{
		{Match: "public.articles", ID: []string{"id"}},
		{Match: "public.*", ID: []string{"slug"}},
	}
	bc, err := c.BackfillSource([]string{"public.articles", "public.pages", "other.notes"}, "", false, true)
	require.NoError(t, err)
	require.Len(t, bc.Tables, 3)
	require.Equal(t, []string{"id"}, bc.Tables[0].ID, "the exact match")
	require.Equal(t, []string{"slug"}, bc.Tables[1].ID, "the pattern that selects it")
	require.Nil(t, bc.Tables[2].ID, "no entry: the primary key")
	require.Equal(t, []cdc.SourceMove{{Source: "dbz:shop/app", At: at}}, bc.Moves)
}
