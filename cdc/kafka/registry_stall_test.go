package kafka_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
)

// flakyRegistry frames Debezium JSON behind a schema id, as a registry
// format would, and fails like an unreachable registry while down is set.
// Schema id 99 is unknown (a permanent error).
type flakyRegistry struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (f *flakyRegistry) DecodeFramed(_ context.Context, _ string, _ bool, b []byte) (any, map[string]any, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, nil, fmt.Errorf("dial tcp 127.0.0.1:1: connection refused: %w", cdc.ErrRegistryUnavailable)
	}
	if id := binary.BigEndian.Uint32(b[1:5]); id == 99 {
		return nil, nil, errors.New("schema id 99 is not in the registry")
	}
	var v map[string]any
	d := json.NewDecoder(bytesReader(b[5:]))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return nil, nil, err
	}
	return v, nil, nil
}

func framed(id uint32, body string) []byte {
	b := make([]byte, 5, 5+len(body))
	binary.BigEndian.PutUint32(b[1:], id)
	return append(b, body...)
}

func change(id int) string {
	return fmt.Sprintf(`{"op":"c","after":{"id":%d,"body":"x"},"source":{"connector":"postgresql","name":"dbserver1","db":"app","schema":"public","table":"articles","lsn":%d,"ts_ms":1700000000000}}`, id, 1000+id)
}

// While the registry is down a partition stalls: nothing is handed out,
// nothing is dead-lettered, the stall is visible, and every record is
// decoded once the registry answers again. An unknown schema id is
// permanent: its record carries a decode error and is dead-lettered.
func TestRegistryOutageStallsAndRecovers(t *testing.T) {
	b := kafkaSetup(t, 1, 0, 0)
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Topic: b.topic, Key: []byte(fmt.Sprintf(`{"id":%d}`, i)), Value: framed(7, change(i))})
	}
	recs = append(recs, &kgo.Record{Topic: b.topic, Key: []byte(`{"id":5}`), Value: framed(99, change(5))})
	require.NoError(t, b.cl.ProduceSync(t.Context(), recs...).FirstErr())

	reg := &flakyRegistry{}
	reg.down.Store(true)
	src := b.source(t, kafka.Config{Decoder: cdc.NewDecoder(cdc.DecoderConfig{Schemas: reg})})
	col := kafka.NewLagCollector(src)
	pr := prometheus.NewPedanticRegistry()
	pr.MustRegister(col)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	var got []cdc.Record
	for ctx.Err() == nil {
		batch, err := src.Fetch(ctx)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
		got = append(got, batch.Records...)
	}
	cancel()
	require.Empty(t, got, "nothing is handed out while the registry is down")
	require.Greater(t, reg.calls.Load(), int64(1), "the source retried")
	require.Equal(t, 1.0, testutil.ToFloat64(gaugeOnly(col, "ragsync_kafka_schema_registry_stalled")))

	reg.down.Store(false)
	require.Eventually(t, func() bool {
		batch, err := src.Fetch(t.Context())
		require.NoError(t, err)
		got = append(got, batch.Records...)
		return len(got) >= 6
	}, 30*time.Second, 10*time.Millisecond)
	require.Len(t, got, 6, "the records given back are handed out once, in order")
	for i, m := range got[:5] {
		require.NoError(t, m.Err)
		require.NotNil(t, m.Change)
		require.Equal(t, fmt.Sprint(i), m.Change.DocKey)
		require.Equal(t, int64(i), m.Offset)
	}
	var de *cdc.DecodeError
	require.ErrorAs(t, got[5].Err, &de, "an unknown schema id is permanent")
	require.Contains(t, de.Error(), "schema id 99")
	require.Equal(t, 0.0, testutil.ToFloat64(gaugeOnly(col, "ragsync_kafka_schema_registry_stalled")))
}

// gaugeOnly is the one metric of col named name.
func gaugeOnly(col prometheus.Collector, name string) prometheus.Collector {
	return &filtered{col: col, name: name}
}

type filtered struct {
	col  prometheus.Collector
	name string
}

func (f *filtered) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }

func (f *filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	go func() { f.col.Collect(all); close(all) }()
	for m := range all {
		if desc := m.Desc().String(); contains(desc, `"`+f.name+`"`) {
			ch <- m
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
