package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/cdc"
)

// Config tunes the pipeline.
type Config struct {
	// Tables says how rows become documents. Empty means every table, with
	// the default text (all text columns).
	Tables []TableConfig
	// Workers is how many documents are applied concurrently. Changes to one
	// document always go to the same worker, in source order. Defaults to 4.
	Workers int
	// RetryBackoff is the first wait before retrying a transient failure; it
	// doubles up to MaxRetryBackoff, with jitter. Defaults to 200ms.
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the wait between retries. Defaults to 30s.
	MaxRetryBackoff time.Duration
	// MaxAttempts bounds retries of failures that are neither known-transient
	// nor permanent; past it the message is dead-lettered. Known-transient
	// failures (provider down, Postgres restarting) retry until the context
	// ends, which stops fetching: that is the back-pressure. Defaults to 5.
	MaxAttempts int
	// StallAfter is how long a batch may stay in flight while its work is
	// being retried before Healthy reports false (for /readyz): a dependency
	// down that long needs a human or a restart. Defaults to 5m.
	StallAfter time.Duration
	// StallLogInterval is how often a stall (a batch whose work is being
	// retried) is summarised in the log: what fails, since when, which
	// setting to check and what /readyz says. Defaults to 30s.
	StallLogInterval time.Duration
	// Settings names, per failing stage (StageEmbedder, StageSink,
	// StageDeadLetters, StageSource), the settings to check, e.g.
	// "embedder.base_url"; the stall summary prints it. Nil prints none.
	Settings map[string]string
	// DeadLetterWindow is how many of the latest messages the dead-letter
	// guard looks at. Defaults to 100.
	DeadLetterWindow int
	// DeadLetterMaxRatio is the share of DeadLetterWindow that may be
	// dead-lettered: one more and the pipeline stops (without committing
	// the batch) and Healthy reports false, because an error that hits
	// every message must not drain the topic into the dead-letter
	// destination. 1 never stops. Defaults to 0.5.
	DeadLetterMaxRatio float64
	// MaxDocumentBytes bounds the text of one document (after its
	// template): a larger one is dead-lettered with the reason, so that
	// one huge row can neither exhaust memory nor hold every other
	// document behind it. Defaults to 8 MiB.
	MaxDocumentBytes int
	// EmbedSliceChunks is how many chunks of one document are embedded
	// and written to the embedding cache at a time: memory for vectors in
	// flight stays bounded by it whatever the document's size, and a
	// restart after a failure re-embeds nothing already cached. Defaults
	// to 256.
	EmbedSliceChunks int
	// Reuse is near-duplicate reuse and its debt (see ReuseConfig).
	// Defaults to reuse on, within monitor.DefaultCosineBound.
	Reuse ReuseConfig
	// Logger receives start/stop summaries and actionable warnings. Nil
	// discards.
	Logger *slog.Logger
	// Registerer receives the pipeline's metrics. Nil registers nothing.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 200 * time.Millisecond
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = 30 * time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.StallAfter <= 0 {
		c.StallAfter = 5 * time.Minute
	}
	if c.StallLogInterval <= 0 {
		c.StallLogInterval = 30 * time.Second
	}
	if c.DeadLetterWindow <= 0 {
		c.DeadLetterWindow = 100
	}
	if c.DeadLetterMaxRatio <= 0 {
		c.DeadLetterMaxRatio = 0.5
	}
	if c.MaxDocumentBytes <= 0 {
		c.MaxDocumentBytes = 8 << 20
	}
	if c.EmbedSliceChunks <= 0 {
		c.EmbedSliceChunks = 256
	}
	c.Reuse = c.Reuse.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every setting out of range, naming its YAML path.
func (c Config) Validate() error {
	var errs []error
	if c.DeadLetterWindow < 0 {
		errs = append(errs, errors.New("pipeline.dead_letter_window: must be >= 0 (0 means the default, 100)"))
	}
	if c.DeadLetterMaxRatio < 0 || c.DeadLetterMaxRatio > 1 {
		errs = append(errs, fmt.Errorf("pipeline.dead_letter_max_ratio: %g must be between 0 and 1 (0 means the default, 0.5; 1 never stops)", c.DeadLetterMaxRatio))
	}
	if c.MaxDocumentBytes < 0 {
		errs = append(errs, errors.New("pipeline.max_document_bytes: must be >= 0 (0 means the default, 8388608)"))
	}
	if c.EmbedSliceChunks < 0 {
		errs = append(errs, errors.New("pipeline.embed_slice_chunks: must be >= 0 (0 means the default, 256)"))
	}
	if !c.Reuse.Disabled {
		errs = append(errs, c.Reuse.Validate())
	}
	return errors.Join(errs...)
}

// Stages are the pipeline's collaborators. DeadLetters may be nil, in which
// case undecodable messages stop the pipeline instead of being set aside.
// Decoder may be nil when the source hands over decoded changes
// (cdc.Message.Change) only.
type Stages struct {
	Source      Source
	Decoder     Decoder
	Splitter    Splitter
	Embedder    Embedder
	Sink        Sink
	DeadLetters DeadLetters
	// Cache, when set, receives each slice of new vectors as it is
	// embedded (see Config.EmbedSliceChunks); chunks then reach the Sink
	// without vectors, which it takes from the same cache. Nil keeps the
	// vectors on the chunks.
	Cache VectorCache
	// Lookup, when set, reads a document's stored state, stored chunks and
	// cached hashes in one round trip once it is chunked, instead of one
	// read each. It must read the store Sink writes to. A change with
	// unchanged-TOAST columns still reads the stored row before chunking,
	// since its text needs it. Nil reads them one by one.
	Lookup DocumentLookup
	// Transient reports whether an error is worth retrying without limit
	// (a dependency that will come back). Nil treats no error as transient.
	Transient func(error) bool
	// Fatal reports whether an error is a configuration mistake that every
	// message would hit (wrong dimensions, bad API key): the pipeline stops
	// with it instead of dead-lettering message after message. Nil treats no
	// error as fatal.
	Fatal func(error) bool
	// Traces, when set, hears of each change's trace id, apply time and
	// failure (see TraceRecorder). Nil records nothing and costs nothing.
	Traces TraceRecorder
}

// Pipeline moves changes from a source to the sink.
type Pipeline struct {
	cfg     Config
	st      Stages
	log     *slog.Logger
	metrics *metrics
	stats   Stats
	// batchStart is when the batch in flight was fetched (UnixNano, 0 when
	// none) and batchRetries how many retries it needed so far: together
	// they tell a stall (retrying for long) from a big batch (slow but
	// progressing).
	batchStart   atomic.Int64
	batchRetries atomic.Int64
	// failing is the batch's latest retried failure, for the stall summary.
	failing failureNote
	now     func() time.Time
	guard   *dlqGuard
	// warned remembers the tables already warned about (template columns
	// missing from their rows), so each is warned once.
	warned sync.Map
	// shadowMu is held for reading by Process for a whole batch and for
	// writing by SetShadows, so the set changes only between batches.
	shadowMu sync.RWMutex
	shadows  []Shadow
}

// New checks that every stage is present and builds a pipeline.
func New(cfg Config, st Stages) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var errs []error
	if st.Source == nil {
		errs = append(errs, errors.New("pipeline: no source"))
	}
	if st.Splitter == nil {
		errs = append(errs, errors.New("pipeline: no splitter"))
	}
	if st.Embedder == nil {
		errs = append(errs, errors.New("pipeline: no embedder"))
	}
	if st.Sink == nil {
		errs = append(errs, errors.New("pipeline: no sink"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if st.Transient == nil {
		st.Transient = func(error) bool { return false }
	}
	if st.Fatal == nil {
		st.Fatal = func(error) bool { return false }
	}
	p := &Pipeline{
		cfg:   cfg,
		st:    st,
		log:   cfg.Logger.With("stage", "pipeline"),
		stats: newStats(),
		now:   time.Now,
		guard: newDLQGuard(cfg.DeadLetterWindow, cfg.DeadLetterMaxRatio),
	}
	p.metrics = newMetrics(cfg.Registerer, p.inFlightSeconds, p.guard.ratio)
	return p, nil
}

// Healthy reports false when a batch has been in flight for longer than
// Config.StallAfter and needed retries meanwhile: the pipeline is stuck
// behind a dependency (provider or Postgres down, dead-letter topic
// unwritable) and has stopped fetching. It also reports false once the
// dead-letter guard tripped (see Config.DeadLetterMaxRatio). serve's
// /readyz should fail then so the orchestrator notices; a batch that is
// slow without failing is not a stall. Safe for concurrent use.
func (p *Pipeline) Healthy() bool {
	if p.guard.Err() != nil {
		return false
	}
	return !(p.inFlightSeconds() > p.cfg.StallAfter.Seconds() && p.batchRetries.Load() > 0)
}

// inFlightSeconds is the age of the batch in flight, 0 when none.
func (p *Pipeline) inFlightSeconds() float64 {
	start := p.batchStart.Load()
	if start == 0 {
		return 0
	}
	return p.now().Sub(time.Unix(0, start)).Seconds()
}

// Stats returns a snapshot of what the pipeline did so far.
func (p *Pipeline) Stats() Snapshot { return p.stats.snapshot() }

// Run fetches, applies and acknowledges batches until the source is exhausted
// or ctx ends; both return nil. Any other error stops the pipeline and is
// returned; the batch in flight is then not acknowledged and will be replayed.
func (p *Pipeline) Run(ctx context.Context) error {
	p.log.InfoContext(ctx, "pipeline started", "workers", p.cfg.Workers)
	defer func() { p.log.InfoContext(ctx, "pipeline stopped", "stats", p.stats.snapshot().String()) }()
	stopSummaries := p.summariseStalls(ctx)
	defer stopSummaries()
	for {
		b, err := p.st.Source.Fetch(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		start := time.Now()
		p.batchRetries.Store(0)
		p.failing.clear()
		p.batchStart.Store(p.now().UnixNano())
		if err := p.Process(ctx, b.Messages); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if b.Ack != nil {
			if err := p.retry(ctx, "ack", func() error { return b.Ack(ctx) }); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("ack batch: %w", err)
			}
		}
		p.batchStart.Store(0)
		p.metrics.batchSecs.Observe(time.Since(start).Seconds())
	}
}

// item is one decoded change on its way to a worker.
type item struct {
	msg    cdc.Message
	change cdc.Change
}

// Process applies one batch: it returns nil once every message has been
// applied, skipped or dead-lettered, and an error if one could not be (the
// caller must then not acknowledge the batch).
func (p *Pipeline) Process(ctx context.Context, msgs []cdc.Message) error {
	p.shadowMu.RLock()
	defer p.shadowMu.RUnlock()
	var segment []item
	flush := func() error {
		err := p.applyParallel(ctx, segment)
		segment = segment[:0]
		return err
	}
	for _, m := range msgs {
		var start time.Time
		if p.st.Traces != nil {
			start = time.Now()
		}
		dctx, span := tracer().Start(withTraceParent(ctx, messageTraceParent(m)), "ragsync.decode")
		ch, err := p.decode(m)
		endSpan(span, err)
		var skip *cdc.SkipError
		switch {
		case errors.As(err, &skip):
			p.stats.add("skipped_"+skip.Reason, 1)
			p.metrics.changes.WithLabelValues("none", "skipped").Inc()
			p.guard.ok()
			continue
		case errors.Is(err, cdc.ErrSkip):
			p.stats.add("skipped", 1)
			p.metrics.changes.WithLabelValues("none", "skipped").Inc()
			p.guard.ok()
			continue
		case err != nil:
			p.recordTrace(span, start, true)
			if err := p.deadLetter(dctx, m, err); err != nil {
				return err
			}
			continue
		}
		if ch.Op == cdc.OpTruncate {
			// A truncate orders against every document of its table, so it
			// is a barrier: what came before it is applied first.
			if err := flush(); err != nil {
				return err
			}
			if err := p.applyOne(ctx, item{m, ch}); err != nil {
				return err
			}
			continue
		}
		segment = append(segment, item{m, ch})
	}
	return flush()
}

// decode returns the change a message carries: the one its transport built,
// or the Debezium JSON of its value decoded.
func (p *Pipeline) decode(m cdc.Message) (cdc.Change, error) {
	if m.Change != nil {
		return *m.Change, nil
	}
	if p.st.Decoder == nil {
		return cdc.Change{}, fmt.Errorf("decode %s/%d@%d: the source handed over bytes and the pipeline has no decoder", m.Topic, m.Partition, m.Offset)
	}
	return p.st.Decoder.Decode(m)
}

// applyParallel applies a segment with up to Workers documents at once.
// Each document's changes stay in source order on one worker; workers take
// the next document as soon as they finish one, rather than a fixed share
// of them: with fixed lanes a batch lasted as long as its longest lane, and
// the last documents of each batch ran almost alone, which left the
// embedding coalescer little to put in one request.
func (p *Pipeline) applyParallel(ctx context.Context, items []item) error {
	if len(items) == 0 {
		return nil
	}
	docs := groupByDocument(items)
	workers := min(p.cfg.Workers, len(docs))
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for {
				n := int(next.Add(1)) - 1
				if n >= len(docs) {
					return nil
				}
				for _, it := range docs[n] {
					if err := p.applyOne(gctx, it); err != nil {
						return err
					}
				}
			}
		})
	}
	return g.Wait()
}

// groupByDocument splits items into one run per document, in the order of
// each document's first change, each run in source order.
func groupByDocument(items []item) [][]item {
	at := make(map[string]int, len(items))
	var docs [][]item
	for _, it := range items {
		id := DocID(it.change)
		n, ok := at[id]
		if !ok {
			n = len(docs)
			at[id] = n
			docs = append(docs, nil)
		}
		docs[n] = append(docs[n], it)
	}
	return docs
}

// applyOne applies a change, retrying transient failures, and dead-letters it
// when it can never be applied.
func (p *Pipeline) applyOne(ctx context.Context, it item) error {
	var start time.Time
	if p.st.Traces != nil {
		start = time.Now()
	}
	ctx, span := tracer().Start(withTraceParent(ctx, it.change.TraceParent), "ragsync.apply", changeAttrs(it.change))
	err := p.retry(ctx, "apply", func() error { return p.apply(ctx, it.change) })
	endSpan(span, err)
	if ctx.Err() == nil {
		// A change cut short by shutdown is neither slow nor failed.
		p.recordTrace(span, start, err != nil)
	}
	if err == nil {
		p.guard.ok()
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	if p.st.Fatal(err) {
		return fmt.Errorf("stop at %s/%d@%d: %w", it.msg.Topic, it.msg.Partition, it.msg.Offset, err)
	}
	if err := p.deadLetter(ctx, it.msg, err); err != nil {
		return err
	}
	p.metrics.changes.WithLabelValues(string(it.change.Op), "dead_lettered").Inc()
	return nil
}

// retry runs fn until it succeeds, fails permanently, fails with an
// unclassified error MaxAttempts times, or ctx ends. Transient failures retry
// without limit: a provider or database that is down stops progress (and so
// fetching) rather than losing work.
func (p *Pipeline) retry(ctx context.Context, stage string, fn func() error) error {
	backoff := p.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		var perm interface{ Permanent() bool }
		if errors.As(err, &perm) && perm.Permanent() {
			return err
		}
		if p.st.Fatal(err) {
			// Every message would hit it: no point waiting.
			return err
		}
		transient := p.st.Transient(err)
		if !transient && attempt >= p.cfg.MaxAttempts {
			return err
		}
		cause := "unclassified"
		if transient {
			cause = "transient"
		}
		p.metrics.retries.WithLabelValues(stage, cause).Inc()
		p.stats.add("retries", 1)
		p.failing.note(stageOf(stage, err), err, p.now())
		p.batchRetries.Add(1)
		if attempt == 1 || attempt%10 == 0 {
			p.log.WarnContext(ctx, "retrying after failure", "step", stage, "attempt", attempt, "error", err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, p.cfg.MaxRetryBackoff)
	}
}

func (p *Pipeline) deadLetter(ctx context.Context, m cdc.Message, cause error) error {
	if err := p.guard.deadLetter(cause); err != nil {
		return fmt.Errorf("stop at %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
	}
	p.stats.add("dead_lettered", 1)
	if p.st.DeadLetters == nil {
		return fmt.Errorf("no dead-letter destination for %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, cause)
	}
	p.log.WarnContext(ctx, "message dead-lettered", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "error", cause)
	m = withTraceHeader(ctx, m)
	return p.retry(ctx, "dead_letter", func() error { return p.st.DeadLetters.Put(ctx, m, cause) })
}
