package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/cdc/kafka"
)

// TestMain fails the run if any goroutine is still alive once every test has
// finished and cleaned up: a franz-go client left open by a source keeps
// several.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFailedStartLeavesNoGoroutines: a source that stops at the end reads
// the end offsets while it starts; when that fails (here the topic does not
// exist) the client it made is closed, so nothing outlives the error.
func TestFailedStartLeavesNoGoroutines(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer c.Close()
	before := goleak.IgnoreCurrent() // the cluster's own, and other tests'
	_, err = kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{"no.such.topic"}, Group: "g", StopAtEnd: true})
	require.Error(t, err)
	require.Contains(t, err.Error(), "no.such.topic")
	goleak.VerifyNone(t, before)
}
