package monitor

import (
	"encoding/binary"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// BenchmarkRecordTrace is what one applied change costs a pipeline worker
// with the monitor on: a lock of its own and a few comparisons, with the
// workers recording in parallel.
func BenchmarkRecordTrace(b *testing.B) {
	var w worstTraces
	b.RunParallel(func(pb *testing.PB) {
		var id trace.TraceID
		n := uint64(0)
		for pb.Next() {
			n++
			binary.BigEndian.PutUint64(id[8:], n)
			w.add(slowTrace{id: id, seconds: float64(n%1000) * 1e-3})
			if n%4096 == 0 {
				w.rotate()
			}
		}
	})
}
