
// BenchmarkRecordTrace is what each applied change costs the pipeline's
// worker with the monitor on (one lock and a few comparisons; the workers
// contend for it in parallel).
func BenchmarkRecordTrace(b *testing.B) {
	bb := setup(&testing.T{})
	_ = bb
	b.Skip("placeholder")
}
