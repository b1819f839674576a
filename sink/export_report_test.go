package sink

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ChunksCollectorForTest is ragsync_index_chunks over cat's schema, read
// again when the last reading is older than every by now's clock.
func ChunksCollectorForTest(cat *Catalog, every time.Duration, now func() time.Time) prometheus.Collector {
	return &chunksCollector{cat: cat, every: every, now: now}
}
