package monitor

import "context"

// queryTap is an embedder whose every result also enters the query-drift
// window: give it to the front door, which embeds exactly the queries users
// send, so query drift needs no change to the front door itself.
type queryTap struct {
	Embedder
	d *Drift
}

// QueryTap wraps the front door's embedder so that the monitor sees every
// query vector. Observing costs a copy of the slice header under a mutex.
func (m *Monitor) QueryTap(e Embedder) Embedder { return queryTap{Embedder: e, d: m.query} }

func (q queryTap) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	vs, err := q.Embedder.Embed(ctx, texts)
	if err == nil {
		q.d.Observe(vs...)
	}
	return vs, err
}
