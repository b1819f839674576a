package sink_test

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkUpsert20Chunks upserts a 20-chunk document per iteration, each
// version editing two chunks, so it measures the steady state of a
// frequently edited document: 18 untouched, 2 inserted, 2 removed.
func BenchmarkUpsert20Chunks(b *testing.B) {
	s, _ := setup(b)
	ctx := context.Background()
	hashes := make([]string, 20)
	for i := range hashes {
		hashes[i] = fmt.Sprint("p", i)
	}
	b.ReportAllocs()
	v := uint64(0)
	for b.Loop() {
		v++
		hashes[v%20] = fmt.Sprintf("p%d-v%d", v%20, v)
		hashes[(v+7)%20] = fmt.Sprintf("p%d-v%d", (v+7)%20, v)
		out, err := s.Upsert(ctx, doc("bench", v, chunks(hashes...)))
		if err != nil || !out.Applied {
			b.Fatalf("upsert v%d: %+v %v", v, out, err)
		}
	}
}
