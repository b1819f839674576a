package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/pgtest"
)

// A first serve whose start-up fails after the Postgres source was created
// (here the front door's Redis is down) drops the slot and the publication
// it created: nothing is left holding WAL or changing how the source
// database behaves.
func TestFailedFirstServeLeavesNoSlot(t *testing.T) {
	r := pgtest.Replication(t)
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s.articles (id int PRIMARY KEY, title text, body text)`, r.Schema))
	r.Exec(t, fmt.Sprintf(`INSERT INTO %s.articles VALUES (1, 'one', 'a')`, r.Schema))
	_, schema := pgtest.Schema(t)
	path := writePGSourceConfig(t, r, schema, "frontdoor:\n  enabled: true\n  redis_url: redis://127.0.0.1:1/0\n")
	out, err := runCLI(t, "", "serve", "--config", path)
	require.ErrorContains(t, err, "connect to Redis at 127.0.0.1:1", out)
	require.Contains(t, out, "replication slot created", "the source was created before the front door failed")
	var pub, slot bool
	require.NoError(t, r.Conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $2)`, r.Publication, r.Slot).Scan(&pub, &slot))
	require.False(t, slot, "no slot is left holding WAL")
	require.False(t, pub, "no publication is left")
}
