package kafka

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
)

// lagDesc is ragsync_kafka_consumer_lag_records: what KEDA's Kafka scaler or
// an HPA on an external metric scales on.
var lagDesc = prometheus.NewDesc("ragsync_kafka_consumer_lag_records",
	"Records between the group's committed offset and the partition's end, for the partitions assigned to this member.",
	[]string{"topic", "partition"}, nil)

// The schema registry's hold on the source: a partition whose records wait
// for their schema stalls rather than dead-lettering them.
var (
	registryStalledDesc = prometheus.NewDesc("ragsync_kafka_schema_registry_stalled",
		"1 while the source waits for the schema registry (unreachable, a server error or refused credentials), else 0.", nil, nil)
	registryRetriesDesc = prometheus.NewDesc("ragsync_kafka_schema_registry_retries_total",
		"Attempts to decode a record that failed because the schema registry could not give its schema.", nil, nil)
)

// LagCollector reports consumer lag per assigned partition, computed at
// scrape time from the committed offsets and the brokers' end offsets. Each
// member reports only its own partitions, so summing over pods gives the
// group's lag without double counting.
type LagCollector struct {
	src     *Source
	timeout time.Duration
}

// NewLagCollector returns a collector for src; register it on serve's
// registry. A scrape asks the brokers for end offsets, bounded by 5s; on
// failure it reports nothing rather than a stale value.
func NewLagCollector(src *Source) *LagCollector {
	return &LagCollector{src: src, timeout: 5 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- registryStalledDesc
	ch <- registryRetriesDesc
}

// Collect implements prometheus.Collector.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	stalled := 0.0
	if c.src.registryStalled.Load() {
		stalled = 1
	}
	ch <- prometheus.MustNewConstMetric(registryStalledDesc, prometheus.GaugeValue, stalled)
	ch <- prometheus.MustNewConstMetric(registryRetriesDesc, prometheus.CounterValue, float64(c.src.registryRetries.Load()))
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	lag, err := c.src.Lag(ctx)
	if err != nil {
		return
	}
	for t, ps := range lag {
		for p, n := range ps {
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(n), t, strconv.Itoa(int(p)))
		}
	}
}

// Lag returns, per partition assigned to this member, the end offset minus
// the committed offset (minus the start offset when nothing is committed).
func (s *Source) Lag(ctx context.Context) (map[string]map[int32]int64, error) {
	assigned := s.assigned.snapshot()
	if len(assigned) == 0 {
		return map[string]map[int32]int64{}, nil
	}
	committed := s.cl.CommittedOffsets()
	topics := make([]string, 0, len(assigned))
	for t := range assigned {
		topics = append(topics, t)
	}
	adm := kadm.NewClient(s.cl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	for t, ps := range assigned {
		for _, p := range ps {
			end, ok := ends.Lookup(t, p)
			if !ok || end.Err != nil {
				continue
			}
			from := int64(-1)
			if at, ok := committed[t][p]; ok {
				from = at.Offset
			}
			if from < 0 {
				st, ok := starts.Lookup(t, p)
				if !ok || st.Err != nil {
					continue
				}
				from = st.Offset
			}
			setOffset(out, t, p, max(end.Offset-from, 0))
		}
	}
	return out, nil
}

// assignment tracks the partitions assigned to this member, from the group's
// assign/revoke/lost callbacks (which run on the client's goroutines).
type assignment struct {
	mu    sync.Mutex
	parts map[string]map[int32]bool
}

func (a *assignment) set(m map[string][]int32, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for t, ps := range m {
		if a.parts[t] == nil {
			a.parts[t] = map[int32]bool{}
		}
		for _, p := range ps {
			if on {
				a.parts[t][p] = true
			} else {
				delete(a.parts[t], p)
			}
		}
	}
}

func (a *assignment) snapshot() map[string][]int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]int32{}
	for t, ps := range a.parts {
		for p := range ps {
			out[t] = append(out[t], p)
		}
	}
	return out
}
