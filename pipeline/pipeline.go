package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
)

// Config tunes the pipeline.
type Config struct {
	// Tables says how rows become documents. Empty means every table, with
	// the default text (all text columns).
	Tables []TableConfig
	// Workers, when > 0, caps how many changes are applied at once. It is
	// not needed: concurrency follows the work (every document with
	// changes in flight is applied as soon as its earlier changes are),
	// bounded by MaxInFlightBytes and MaxInFlightDocuments, so a slow
	// provider holds more documents in flight instead of capping
	// throughput (Little's law: in flight = rate x latency). Changes to one
	// document are always applied one after another, in source order.
	// Defaults to 0: no cap.
	Workers int
	// MaxInFlightBytes bounds what the work in flight holds in memory, as
	// estimated from what it costs: the bytes of every change handed over
	// and not yet applied (message keys and values, and the values decoded
	// from them or built by a structured source), plus, for every document
	// being applied, what applying it holds (its goroutine, text, chunks,
	// vectors and stored state; see documentCost). Fetching and handing
	// over wait while it is reached, which is the back-pressure that bounds
	// memory. It holds within a batch (a Kafka poll of 500 records waits
	// change by change), to within one change. Defaults to 16 MiB.
	MaxInFlightBytes int
	// MaxInFlightDocuments bounds the documents with changes handed over
	// and not yet applied; fetching and handing over wait while it is
	// reached. Each such document waits on the provider or the sink, so
	// this is also the most embedding calls that can wait for the
	// coalescer to share a request: 256 carry 256 ÷ latency documents/s
	// (1,280/s through a 200 ms provider and sink), while each costs
	// memory (~40-50 KiB on the backlog bench). Defaults to 256.
	MaxInFlightDocuments int
	// SourceName and IndexName label ragsync_pipeline_freshness_seconds
	// (e.g. "kafka" and the index's name). Default to "unknown".
	SourceName, IndexName string
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
	// "embedder.base_url"; the stall summary prints it, and Backlog's
	// Check names it for the stage holding the oldest pending change. Nil
	// prints none.
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
	if c.MaxInFlightBytes <= 0 {
		c.MaxInFlightBytes = 16 << 20
	}
	if c.MaxInFlightDocuments <= 0 {
		c.MaxInFlightDocuments = 256
	}
	if c.SourceName == "" {
		c.SourceName = "unknown"
	}
	if c.IndexName == "" {
		c.IndexName = "unknown"
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
	if c.Workers < 0 {
		errs = append(errs, errors.New("pipeline.workers: must be >= 0 (0 means no cap: concurrency follows the work in flight)"))
	}
	if c.MaxInFlightBytes < 0 {
		errs = append(errs, errors.New("pipeline.max_in_flight_bytes: must be >= 0 (0 means the default, 16777216)"))
	}
	if c.MaxInFlightDocuments < 0 {
		errs = append(errs, errors.New("pipeline.max_in_flight_documents: must be >= 0 (0 means the default, 256)"))
	}
	if c.EmbedSliceChunks < 0 {
		errs = append(errs, errors.New("pipeline.embed_slice_chunks: must be >= 0 (0 means the default, 256)"))
	}
	if !c.Reuse.Disabled {
		errs = append(errs, c.Reuse.Validate())
	}
	return errors.Join(errs...)
}

// Stages are the pipeline's collaborators. Source, Splitter and Target are
// required; DeadLetters may be nil, in which case a change that can never
// be applied stops the pipeline instead of being set aside. Every source
// hands over decoded changes (cdc.Record), so the pipeline decodes nothing.
type Stages struct {
	Source   Source
	Splitter Splitter
	// Target is the index the pipeline writes and its embedder.
	Target Target
	// Shadows are the other indexes of the target's family: each change
	// the target applied reaches them through the same path (see
	// SetShadows, which replaces them while the pipeline runs).
	Shadows     []Target
	DeadLetters DeadLetters
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
	// Observer, when set, hears of every write to the target (see
	// Observer). Nil: nobody is told.
	Observer Observer
}

// Pipeline moves changes from a source to the sink.
type Pipeline struct {
	cfg Config
	st  Stages
	// fingerprint is the Splitter's, read once: every chunk row and
	// render hash records it.
	fingerprint string
	log         *slog.Logger
	metrics     *metrics
	stats       Stats
	// flow is the running flow (nil when Run is not running); its oldest
	// unacknowledged batch and batchRetries, the retries since that batch
	// became the oldest, tell a stall (retrying for long) from a big
	// backlog (slow but progressing).
	flow         atomic.Pointer[flow]
	batchRetries atomic.Int64
	// failing is the batch's latest retried failure, for the stall summary.
	failing failureNote
	now     func() time.Time
	guard   *dlqGuard
	// warned remembers the tables already warned about (template columns
	// missing from their rows), so each is warned once.
	warned sync.Map
	// shadowMu is held for reading while a change is applied and for
	// writing by SetShadows, so the set changes only between applies.
	shadowMu sync.RWMutex
	shadows  []Target
	// marks writes the source's watermark to the targets; nil when the
	// source keeps none.
	marks *watermark
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
	errs = append(errs, st.Target.check("primary"))
	for _, sh := range st.Shadows {
		errs = append(errs, sh.check("shadow"))
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
	p.fingerprint = st.Splitter.Fingerprint()
	p.shadows = slices.Clone(st.Shadows)
	p.metrics = newMetrics(cfg, p.inFlightSeconds, p.guard.ratio, p.inFlight)
	if src, ok := st.Source.(cdc.Watermarker); ok {
		p.marks = &watermark{src: src, saved: map[string]cdc.Mark{}, dirty: make(chan struct{}, 1)}
		if cfg.Registerer != nil {
			cfg.Registerer.MustRegister(newWatermarkCollector(p, cfg.IndexName))
		}
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(newBacklogGauges(cfg, p.Backlog)...)
	}
	return p, nil
}

// Healthy reports false when the oldest batch not acknowledged has been in
// flight for longer than Config.StallAfter and its work needed retries
// meanwhile: the pipeline is stuck
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

// inFlightSeconds is the age of the oldest batch not acknowledged, 0 when
// none.
func (p *Pipeline) inFlightSeconds() float64 {
	start := p.oldestBatch()
	if start.IsZero() {
		return 0
	}
	return p.now().Sub(start).Seconds()
}

// oldestBatch is when the oldest batch not acknowledged was fetched; zero
// when none.
func (p *Pipeline) oldestBatch() time.Time {
	f := p.flow.Load()
	if f == nil {
		return time.Time{}
	}
	t, _ := f.oldestFetched()
	return t
}

// inFlight reports the bytes and documents in flight.
func (p *Pipeline) inFlight() (int64, int) {
	f := p.flow.Load()
	if f == nil {
		return 0, 0
	}
	return f.inFlight()
}

// Stats returns a snapshot of what the pipeline did so far.
func (p *Pipeline) Stats() Snapshot { return p.stats.snapshot() }

// Run fetches, applies and acknowledges until the source is exhausted or
// ctx ends; both return nil. It keeps fetching while earlier changes are
// applied, up to the bounds on work in flight (MaxInFlightBytes,
// MaxInFlightDocuments); each document's changes are applied in source
// order, and each lane's batches are acknowledged in fetch order once every
// change up to them is applied (see flow). Any other error stops the
// pipeline and is returned; what was not acknowledged is replayed by the
// next run.
func (p *Pipeline) Run(ctx context.Context) error {
	p.log.InfoContext(ctx, "pipeline started", "max_in_flight_bytes", p.cfg.MaxInFlightBytes,
		"max_in_flight_documents", p.cfg.MaxInFlightDocuments, "workers", p.cfg.Workers)
	defer func() { p.log.InfoContext(ctx, "pipeline stopped", "stats", p.stats.snapshot().String()) }()
	stopSummaries := p.summariseStalls(ctx)
	defer stopSummaries()

	f := newFlow(ctx, p)
	p.flow.Store(f)
	defer p.flow.Store(nil)
	ackDone := make(chan struct{})
	stopAcks := make(chan struct{})
	go func() {
		defer close(ackDone)
		f.acknowledge(stopAcks)
	}()
	stopMarks := make(chan struct{})
	marksDone := make(chan struct{})
	go func() {
		defer close(marksDone)
		p.tickMarks(f.ctx, stopMarks)
	}()
	eof := p.fetchLoop(f)
	acksStopped := false
	if eof && f.failure() == nil {
		// A finite source is exhausted: wait for the rest to be applied
		// and acknowledged.
		for f.outstanding() && f.ctx.Err() == nil {
			select {
			case <-f.room:
			case <-f.ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		// The last batches leave their lanes when the acknowledging
		// goroutine takes them, before their commit is done: let it finish
		// with a live context, then acknowledge anything still ready, so
		// that the end of a finite source is committed before Run returns
		// (cancelling first lost the last commits, and the next run
		// replayed them).
		close(stopAcks)
		<-ackDone
		acksStopped = true
		if f.failure() == nil && f.ctx.Err() == nil {
			if err := f.ackReady(f.ctx, true); err != nil && f.ctx.Err() == nil {
				f.fail(err)
			}
		}
	}
	f.cancel(nil)
	f.runners.Wait()
	if !acksStopped {
		close(stopAcks)
		<-ackDone
	}
	// What was applied before the stop is acknowledged, without the
	// cancelled context: a restart then replays less.
	if ctx.Err() != nil || f.failure() != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := f.ackReady(fctx, false); err != nil {
			p.log.WarnContext(ctx, "acknowledge applied changes at stop failed; they will be replayed", "error", err)
		}
		cancel()
	}
	// The watermark of what was acknowledged last, written once more now
	// that the writer beside the acknowledgements has stopped.
	close(stopMarks)
	<-marksDone
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	p.saveMarks(mctx)
	cancel()
	if err := f.failure(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// fetchLoop fetches and hands over batches until the source is exhausted
// (true), ctx ends or the flow fails.
func (p *Pipeline) fetchLoop(f *flow) (eof bool) {
	for {
		if waited := f.waitRoom(); waited > 0 {
			p.metrics.backpressure.Add(waited.Seconds())
		}
		if f.ctx.Err() != nil {
			return false
		}
		b, err := p.st.Source.Fetch(f.ctx)
		if errors.Is(err, io.EOF) {
			return true
		}
		if f.ctx.Err() != nil {
			return false
		}
		if err != nil {
			f.fail(fmt.Errorf("fetch: %w", err))
			return false
		}
		p.dispatch(f, b)
	}
}

// dispatch decodes a batch and hands each change to its document, each
// after waiting for room: a batch larger than the bounds (a Kafka poll of
// 500 changes to 500 documents) then waits within itself instead of
// passing them.
func (p *Pipeline) dispatch(f *flow, b cdc.Batch) {
	now := p.now()
	t := f.admit(b, now)
	early := p.deletesFirst(f, t, b.Records, now)
	for i, m := range b.Records {
		if early[i] {
			continue
		}
		if waited := f.waitRoom(); waited > 0 {
			p.metrics.backpressure.Add(waited.Seconds())
		}
		if f.ctx.Err() != nil {
			return // the batch stays unacknowledged
		}
		var start time.Time
		if p.st.Traces != nil {
			start = time.Now()
		}
		dctx, span := tracer().Start(withTraceParent(f.ctx, messageTraceParent(m)), "ragsync.receive")
		ch, err := received(m)
		endSpan(span, err)
		var skip *cdc.SkipError
		switch {
		case errors.As(err, &skip):
			p.stats.add("skipped_"+skip.Reason, 1)
			p.metrics.changes.WithLabelValues("none", "skipped").Inc()
			p.guard.ok()
			f.skip(t)
			continue
		case errors.Is(err, cdc.ErrSkip):
			p.stats.add("skipped", 1)
			p.metrics.changes.WithLabelValues("none", "skipped").Inc()
			p.guard.ok()
			f.skip(t)
			continue
		case err != nil:
			p.recordTrace(span, start, true)
			if err := p.deadLetter(dctx, m, err); err != nil {
				if f.ctx.Err() == nil {
					f.fail(err)
				}
				return
			}
			f.skip(t)
			continue
		}
		cost := messageCost(m)
		key := DocID(ch)
		if ch.Op == cdc.OpTruncate {
			key = "\x00truncate\x00" + ch.Table
		}
		f.submit(&work{msg: m, change: ch, batch: t, cost: cost, key: key, fetched: now})
	}
}

// deletesFirst hands over, before the rest of the batch and without
// waiting for room, the deletes of documents that have no earlier change
// in the batch, and returns which records it handed over. A delete
// embeds nothing and costs little, so it need not wait behind edits of
// other documents that wait for the provider: a document removed at its
// source leaves the index as soon as its own earlier changes are applied.
// No document's changes are reordered: its earlier changes (of earlier
// batches) are already queued before the delete, and its later ones are
// handed over after it. A batch with a truncate keeps its order (the
// truncate orders every change of its table). Deletes still wait for the
// source to deliver them: a partition is read in order.
func (p *Pipeline) deletesFirst(f *flow, t *tracked, recs []cdc.Record, now time.Time) map[int]bool {
	hasDelete := false
	for _, m := range recs {
		if m.Change == nil {
			continue
		}
		switch m.Change.Op {
		case cdc.OpTruncate:
			return nil
		case cdc.OpDelete:
			hasDelete = true
		}
	}
	if !hasDelete {
		return nil
	}
	early := map[int]bool{}
	seen := map[string]bool{}
	for i, m := range recs {
		if m.Change == nil {
			continue
		}
		key := DocID(*m.Change)
		if m.Change.Op == cdc.OpDelete && !seen[key] && f.ctx.Err() == nil {
			ch := *m.Change
			_, span := tracer().Start(withTraceParent(f.ctx, messageTraceParent(m)), "ragsync.receive")
			endSpan(span, nil)
			f.submit(&work{msg: m, change: ch, batch: t, cost: messageCost(m), key: key, fetched: now})
			early[i] = true
		}
		seen[key] = true
	}
	return early
}

// received returns the change a record carries, or why it carries none.
// A record with neither is a transport's mistake, refused like a change
// that cannot be decoded, so that it is set aside with its bytes rather
// than lost.
func received(m cdc.Record) (cdc.Change, error) {
	switch {
	case m.Change != nil:
		return *m.Change, nil
	case m.Err != nil:
		return cdc.Change{}, m.Err
	}
	return cdc.Change{}, fmt.Errorf("record %s/%d@%d: the source handed over neither a change nor the reason it has none", m.Topic, m.Partition, m.Offset)
}

// applyOne applies a change, retrying transient failures, and dead-letters it
// when it can never be applied.
func (p *Pipeline) applyOne(ctx context.Context, it *work) error {
	var start time.Time
	if p.st.Traces != nil {
		start = time.Now()
	}
	// The set of shadows changes only between two changes' applies (see
	// SetShadows).
	p.shadowMu.RLock()
	defer p.shadowMu.RUnlock()
	ctx, span := tracer().Start(withTraceParent(ctx, it.change.TraceParent), "ragsync.apply", changeAttrs(it.change))
	err := p.retry(ctx, "apply", func() error {
		it.mark(stageSink) // each attempt begins by reading the index
		return p.apply(ctx, it.change, it)
	})
	endSpan(span, err)
	if ctx.Err() == nil {
		// A change cut short by shutdown is neither slow nor failed.
		p.recordTrace(span, start, err != nil)
	}
	if err == nil {
		p.guard.ok()
		p.observeFreshness(it)
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

// observeFreshness records, for a change now in the index, the time from
// its commit in the source (pgoutput's commit timestamp, Debezium's
// source.ts_ms) to now, on this host's clock: the source's clock must agree
// with it (NTP) for the figure to mean anything across hosts. Snapshot
// reads (backfill, Debezium's initial snapshot) carry the snapshot's time,
// not a commit's, and are left out, as are changes without a timestamp.
func (p *Pipeline) observeFreshness(it *work) {
	ch := it.change
	if ch.Version.TS == 0 || ch.Version.Snapshot || ch.Op == cdc.OpRead {
		return
	}
	p.metrics.freshness.Observe(max(0, p.now().Sub(ch.Version.Time()).Seconds()))
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

func (p *Pipeline) deadLetter(ctx context.Context, m cdc.Record, cause error) error {
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
