package monitor

import "context"

// queryTap is an embedder whose every result also enters the query-drift
// windows (against the query reference, and against the corpus): give it to the front door, which embeds exactly the queries users
// send, so query drift needs no change to the front door itself.
type queryTap struct {
	Embedder
	ds []*Drift
}

// QueryTap wraps the front door's embedder so that the monitor sees every
// query vector. Observing costs a copy of the slice header under a mutex.
func (m *Monitor) QueryTap(e Embedder) Embedder {
	return queryTap{Embedder: e, ds: []*Drift{m.queryRef, m.query}}
}

func (q queryTap) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vs, err := q.Embedder.Embed(ctx, texts)
	if err == nil {
		for _, d := range q.ds {
			d.Observe(vs...)
		}
	}
	return vs, err
}
