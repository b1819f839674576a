package fallback

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/internal/redistest"
	"github.com/ragsync/ragsync/sink"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	closeBenchFixture()
	if code == 0 {
		// Nothing is ignored: every pool and Redis client a test opens is
		// closed by its cleanup (the benchmark fixture's just above), and
		// their background goroutines end with Close.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

const testDims = 32

// testEmbedder is a deterministic bag-of-words embedder (FNV-hashed word
// features, L2-normalised) that counts calls and can be made to fail. The
// real embedder package is exercised by its own tests; here only call counts
// and determinism matter.
type testEmbedder struct {
	dims  int // 0 means testDims
	calls atomic.Int64
	fail  atomic.Bool
}

func (e *testEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.calls.Add(1)
	if e.fail.Load() {
		return nil, errors.New("embedder down (test)")
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = embedDims(t, cmp.Or(e.dims, testDims))
	}
	return out, nil
}

func embedText(t string) []float32 { return embedDims(t, testDims) }

func embedDims(t string, dims int) []float32 {
	v := make([]float32, dims)
	for _, w := range strings.Fields(strings.ToLower(t)) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(w))
		s := h.Sum64()
		sign := float32(1)
		if s&1 == 1 {
			sign = -1
		}
		v[(s>>1)%uint64(dims)] += sign
	}
	var n float64
	for _, x := range v {
		n += float64(x * x)
	}
	if n == 0 {
		v[0] = 1
		return v
	}
	for i := range v {
		v[i] /= float32(math.Sqrt(n))
	}
	return v
}

// countingSearcher wraps the real sink.Store, counting the queries that reach
// Postgres; fail makes vector search fail (as if pgvector were down).
type countingSearcher struct {
	store      *sink.Store
	searches   atomic.Int64
	textSearch atomic.Int64
	fail       atomic.Bool
	delay      time.Duration
	// gate, when set, holds each vector search until it is closed; waiting
	// counts the searches held there.
	gate    atomic.Pointer[chan struct{}]
	waiting atomic.Int64
	// active and peak count the vector searches running at once.
	active, peak atomic.Int64
}

func (s *countingSearcher) Search(ctx context.Context, vec []float32, q sink.Query) ([]sink.Hit, error) {
	s.searches.Add(1)
	for n := s.active.Add(1); ; {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	defer s.active.Add(-1)
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if g := s.gate.Load(); g != nil {
		s.waiting.Add(1)
		<-*g
		s.waiting.Add(-1)
	}
	if s.fail.Load() {
		return nil, errors.New("pgvector down (test)")
	}
	return s.store.Search(ctx, vec, q)
}

func (s *countingSearcher) SearchText(ctx context.Context, text string, q sink.Query) ([]sink.Hit, error) {
	s.textSearch.Add(1)
	return s.store.SearchText(ctx, text, q)
}

type testDoc struct {
	key, tenant string
	texts       []string
}

var testDocs = []testDoc{
	{"1", "acme", []string{"Redis streams deliver queries to workers", "Consumer groups share the pending entries list"}},
	{"2", "acme", []string{"pgvector stores embeddings next to the rows", "HNSW indexes make cosine search fast"}},
	{"3", "globex", []string{"Bloom filters reject unknown tenants cheaply", "A negative cache remembers empty answers"}},
	{"4", "globex", []string{"Circuit breakers stop hammering a failing database"}},
}

const testTable = "public.articles"

// seedStore opens a store in a fresh schema and writes testDocs, with
// their tenants when tenants is set. An index with tenants refuses a
// search that names none (it would mix them), so tests about other
// behaviour seed theirs without.
func seedStore(t testing.TB, tenants bool) (*sink.Store, string) {
	t.Helper()
	pool, schema := pgtest.Schema(t)
	store := newStore(t, pool, schema)
	ctx := context.Background()
	for _, d := range testDocs {
		tenant := d.tenant
		if !tenants {
			tenant = ""
		}
		doc := sink.Document{Table: testTable, Key: d.key, Tenant: tenant,
			Version: cdc.Version{Kind: "pg", Parts: []uint64{1}}, SourceTS: time.Now(),
			Metadata: map[string]any{"lang": "en"}}
		for i, text := range d.texts {
			doc.Chunks = append(doc.Chunks, sink.Chunk{Position: i, Hash: fmt.Sprintf("%s-%d", d.key, i), Text: text, Tokens: len(strings.Fields(text)), Vector: embedText(text)})
		}
		_, err := store.Upsert(ctx, doc)
		require.NoError(t, err)
	}
	return store, schema
}

func newStore(t testing.TB, pool *pgxpool.Pool, schema string) *sink.Store {
	t.Helper()
	store, err := sink.OpenIndex(context.Background(), pool, sink.Config{Mode: sink.Write, Schema: schema, Index: "articles", Model: "test-bow", Dimensions: testDims})
	require.NoError(t, err)
	return store
}

// bundle is one test's front door world.
type bundle struct {
	rdb      *redis.Client
	prefix   string
	cfg      Config
	store    *sink.Store
	schema   string
	emb      *testEmbedder
	searcher *countingSearcher
	reg      *prometheus.Registry
	fd       *FrontDoor
	client   *Client
}

// testConfig is the front door the tests run: retries and dead-lettering
// happen within a test, without any timed assertion. Its min_idle (2 s) is
// long enough that a loaded machine does not redeliver a request that is
// merely slow (which answered "shared" or searched twice where a test did
// not expect it); tests about reclaim wait for it or set their own.
func testConfig(prefix string) Config {
	return Config{
		Prefix: prefix, Index: "articles", Workers: 2,
		MinIdle: 2 * time.Second, ReclaimInterval: 25 * time.Millisecond,
		BlockTimeout: 50 * time.Millisecond, MaxDeliveries: 2,
		AllowedFilters: []string{FilterDocID, FilterTable, "lang"},
		Bloom:          BloomConfig{Bits: 1 << 20, Hashes: 7},
	}
}

// setup is a front door over testDocs without tenants; setupTenants over
// testDocs with theirs (acme owns 1 and 2, globex 3 and 4).
func setup(t testing.TB, mutate func(*Config)) *bundle {
	t.Helper()
	return setupWith(t, false, mutate)
}

func setupTenants(t testing.TB, mutate func(*Config)) *bundle {
	t.Helper()
	return setupWith(t, true, mutate)
}

func setupWith(t testing.TB, tenants bool, mutate func(*Config)) *bundle {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	store, schema := seedStore(t, tenants)
	b := &bundle{rdb: rdb, prefix: prefix, store: store, schema: schema, emb: &testEmbedder{},
		searcher: &countingSearcher{store: store}, reg: prometheus.NewRegistry()}
	b.cfg = testConfig(prefix)
	if mutate != nil {
		mutate(&b.cfg)
	}
	b.fd = b.newFrontDoor(t, b.cfg, b.reg)
	b.client = NewClient(rdb, prefix)
	b.client.Poll = 100 * time.Millisecond
	t.Cleanup(func() { require.NoError(t, b.client.Close()) })
	return b
}

func (b *bundle) newFrontDoor(t testing.TB, cfg Config, reg prometheus.Registerer) *FrontDoor {
	t.Helper()
	fd, err := NewFrontDoor(cfg, b.rdb, b.emb, b.searcher, reg, nil)
	require.NoError(t, err)
	return fd
}

// run starts fd.Run until the test ends (or the returned cancel is called)
// and checks it returns nil.
func run(t testing.TB, fd *FrontDoor) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var err error
	go func() {
		defer wg.Done()
		err = fd.Run(ctx)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		require.NoError(t, err)
	})
	t.Cleanup(stop)
	return stop
}

func (b *bundle) search(t testing.TB, q Query) (Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return b.client.Search(ctx, q)
}

// sendRaw XADDs a request with exactly the given fields.
func (b *bundle) sendRaw(t *testing.T, fields ...any) {
	t.Helper()
	require.NoError(t, b.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: b.fd.keys.requests(), Values: fields}).Err())
}

// readReplies waits until stream holds n entries and returns them.
func (b *bundle) readReplies(t *testing.T, stream string, n int) []redis.XMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		l, err := b.rdb.XLen(ctx, stream).Result()
		require.NoError(t, err)
		if l >= int64(n) {
			msgs, err := b.rdb.XRange(ctx, stream, "-", "+").Result()
			require.NoError(t, err)
			return msgs
		}
		select {
		case <-ctx.Done():
			t.Fatalf("got %d of %d replies on %s", l, n, stream)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// quiesce waits until no request or dead letter is pending or undelivered, so
// "exactly one reply" can be checked without timing.
func (b *bundle) quiesce(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		busy := false
		for _, s := range []string{b.fd.keys.requests(), b.fd.keys.dlq()} {
			groups, err := b.rdb.XInfoGroups(ctx, s).Result()
			require.NoError(t, err)
			for _, g := range groups {
				if g.Pending > 0 || g.Lag > 0 {
					busy = true
				}
			}
		}
		if !busy {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("front door did not settle")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func counter(t *testing.T, m *metrics, outcome string) float64 {
	t.Helper()
	return testutil.ToFloat64(m.requests.WithLabelValues(outcome))
}

func testutilReclaimed(fd *FrontDoor) float64 { return testutil.ToFloat64(fd.metrics.reclaimed) }

func redisForTest(t *testing.T) (*redis.Client, string) { return redistest.Client(t) }

func testutilDeadLetters(fd *FrontDoor) float64 { return testutil.ToFloat64(fd.metrics.deadLetters) }
func testutilGauge(fd *FrontDoor) float64       { return testutil.ToFloat64(fd.metrics.breakerState) }

// waitCounter waits until the outcome counter reaches want. A hit is
// answered and acknowledged inside one Lua script, so the caller can hold
// the reply a moment before the worker has counted it.
func waitCounter(t *testing.T, m *metrics, outcome string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := counter(t, m, outcome)
		if got == want || time.Now().After(deadline) {
			require.Equal(t, want, got, "ragsync_frontdoor_requests_total{outcome=%q}", outcome)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// requireSearched checks that a reply came from a search of the index, not
// from the cache or a defence: SourceSearch, or SourceShared when, on a
// loaded machine, the request was redelivered past the tests' short
// min_idle and its second delivery joined the search already running for
// it (still one search).
func requireSearched(t testing.TB, res Result) {
	t.Helper()
	require.Contains(t, []string{SourceSearch, SourceShared}, res.Source)
}
