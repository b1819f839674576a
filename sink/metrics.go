package sink

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	// editSimilarity is each applied update's similarity to the stored
	// version, 0–100, by method (ssdeep, shingle).
	editSimilarity *prometheus.HistogramVec
	// groupSize is the documents of each transaction that wrote several
	// (see groupCommit); groupFallbacks counts groups rolled back and
	// written document by document.
	groupSize      prometheus.Histogram
	groupFallbacks prometheus.Counter
}

// newMetrics registers the sink's metrics with reg (nil: none). Two Stores
// on one registry share the collectors instead of failing.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		editSimilarity: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ragsync_sink_edit_similarity",
			Help:    "Similarity (0-100) of each applied document update to the version it replaced, by method: ssdeep, or shingle for texts under ssdeep's 4096-byte minimum.",
			Buckets: []float64{10, 25, 50, 75, 90, 95, 98, 99, 100},
		}, []string{"method"}),
		groupSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ragsync_sink_group_documents",
			Help:    "Documents written by each transaction that wrote several together (concurrent writes share a transaction; a document alone is not counted).",
			Buckets: []float64{2, 4, 8, 16, 32},
		}),
		groupFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ragsync_sink_group_fallbacks_total",
			Help: "Transactions of several documents that rolled back (a concurrent writer, a deadlock) and were written again document by document.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.editSimilarity, err = register(reg, m.editSimilarity); err != nil {
		return nil, err
	}
	if m.groupSize, err = register(reg, m.groupSize); err != nil {
		return nil, err
	}
	if m.groupFallbacks, err = register(reg, m.groupFallbacks); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector registered already under
// its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return c, err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok {
		return c, err
	}
	return existing, nil
}

// chunkGroupsEvery is how long the index chunk counts are kept before a
// scrape reads them again: the GROUP BY reads every chunk row of the
// schema (a sequential scan of the largest table), too much for every
// scrape or even every minute, while a mix of settings changes over hours.
const chunkGroupsEvery = 15 * time.Minute

var indexChunksDesc = prometheus.NewDesc("ragsync_index_chunks",
	"Chunk rows of each index by the model version that embedded them and the chunker settings (fingerprint) that cut them; \"unknown\" for rows written before either was recorded. Several series for one index are a mix that ragsync index status details. Read at most once every 15 minutes, on a scrape.",
	[]string{"index", "model_version", "chunker"}, nil)

// chunksCollector is ragsync_index_chunks: Catalog.ChunkGroups over every
// index of the schema, read on a scrape when the last reading is older
// than every (never more often), so an unscraped process never runs it.
type chunksCollector struct {
	cat   *Catalog
	every time.Duration
	now   func() time.Time

	mu     sync.Mutex
	read   time.Time
	groups []ChunkGroup
}

func (c *chunksCollector) Describe(ch chan<- *prometheus.Desc) { ch <- indexChunksDesc }

func (c *chunksCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.current() {
		ch <- prometheus.MustNewConstMetric(indexChunksDesc, prometheus.GaugeValue, float64(g.Chunks),
			g.Index, unknownIfEmpty(g.ModelVersion), unknownIfEmpty(g.Chunker))
	}
}

// current is the last reading, read again when it is older than every. A
// failed reading keeps the previous one (and is tried at the next scrape
// after every).
func (c *chunksCollector) current() []ChunkGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && c.now().Sub(c.read) < c.every {
		return c.groups
	}
	c.read = c.now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if groups, err := c.cat.ChunkGroups(ctx, ""); err == nil {
		c.groups = groups
	}
	return c.groups
}

func unknownIfEmpty(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// registerChunks registers ragsync_index_chunks for the schema of cat with
// reg (nil: none); a registry that has it already keeps its own.
func registerChunks(reg prometheus.Registerer, cat *Catalog) error {
	if reg == nil {
		return nil
	}
	_, err := register[prometheus.Collector](reg, &chunksCollector{cat: cat, every: chunkGroupsEvery, now: time.Now})
	return err
}
