package sink

import "context"

// Flush has nothing to do: every write of a Store commits in its own
// transaction before it returns.
func (s *Store) Flush(context.Context) error { return nil }

// CacheVectors goes to the store's embedding cache.
func (b *Bulk) CacheVectors(ctx context.Context, hashes, texts []string, vecs [][]float32) error {
	return b.s.CacheVectors(ctx, hashes, texts, vecs)
}

// Cached answers from the store's cache and the buffered vectors.
func (b *Bulk) Cached(ctx context.Context, hashes []string) (map[string]bool, error) {
	got, err := b.s.Cached(ctx, hashes)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hashes {
		if _, ok := b.vecs[h]; ok {
			if got == nil {
				got = map[string]bool{}
			}
			got[h] = true
		}
	}
	return got, nil
}

// Lookup reads the store, with the buffered vectors counted as cached.
func (b *Bulk) Lookup(ctx context.Context, id string, hashes []string) (Lookup, error) {
	l, err := b.s.Lookup(ctx, id, hashes)
	if err != nil {
		return l, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range hashes {
		if _, ok := b.vecs[h]; ok {
			if l.Cached == nil {
				l.Cached = map[string]bool{}
			}
			l.Cached[h] = true
		}
	}
	return l, nil
}
