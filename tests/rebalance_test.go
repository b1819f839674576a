package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRebalanceMidStream runs two serve processes in one group, adds a third
// and stops one of the first two while the backlog drains; the index must
// equal a clean single run's.
func TestRebalanceMidStream(t *testing.T) {
	t.Parallel() // own schema, slot or kfake cluster, own application_name
	if testing.Short() {
		t.Skip("rebalance test: long; skipped under -short")
	}
	events := faultHistory(11, 300, 3000)
	want := cleanRunIndex(t, events)

	w := newKafkaWorld(t, 6)
	w.produce(t, kafkaRecords(events))
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("rb"))
	total := w.lagOf(t, "rb")
	a := e.startServe("serve-a")
	b := e.startServe("serve-b")
	waitLagBelow(t, w, "rb", total*3/4)
	c := e.startServe("serve-c") // joins mid-stream
	waitLagBelow(t, w, "rb", total/2)
	// a is told to leave while records remain; whether the others drain
	// them before a has finished leaving depends on the machine's speed.
	require.Positive(t, w.lagOf(t, "rb"), "the backlog drained before a could leave; the scenario needs more events")
	stopServe(t, a) // leaves mid-stream
	w.waitCaughtUp(t, "rb", 4*time.Minute, b, c)
	stopServe(t, b)
	stopServe(t, c)
	t.Logf("rebalance: %d events, 3 members (1 joined, 1 left mid-stream), %d dead letters", len(events), w.dlqCount(t))
	require.Zero(t, w.dlqCount(t))
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}

// waitLagBelow waits until the group has committed enough that fewer than n
// records remain.
func waitLagBelow(t *testing.T, w *kafkaWorld, group string, n int64) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for w.lagOf(t, group) >= n {
		require.True(t, time.Now().Before(deadline), "no progress below %d", n)
		time.Sleep(100 * time.Millisecond)
	}
}
