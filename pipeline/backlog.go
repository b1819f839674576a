package pipeline

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
)

// Where a change of the backlog is held (Backlog.Stage).
const (
	// BacklogSource: fetched from the source, not yet handed over to be
	// applied. A change waits there while the work in flight is at
	// pipeline.max_in_flight_bytes or max_in_flight_documents
	// (back-pressure), or while a change before it in its batch that could
	// not be decoded is being dead-lettered.
	BacklogSource = "source"
	// BacklogQueued: handed over, waiting for its turn: behind an earlier
	// change of its document, a truncate of its table, or a free slot
	// under pipeline.workers.
	BacklogQueued = "queued"
	// BacklogProvider: waiting for, or in, an embedding call.
	BacklogProvider = "provider"
	// BacklogSink: reading or writing the index in Postgres (the stored
	// state read before chunking, the embedding cache, the document's
	// transaction, the shadows' writes).
	BacklogSink = "sink"
)

// backlogStages are the values of work.stage, in order.
var backlogStages = [...]string{BacklogQueued, BacklogSink, BacklogProvider}

// Indexes of backlogStages, stored in work.stage.
const (
	stageQueued uint32 = iota
	stageSink
	stageProvider
)

// Backlog is the pipeline's backlog at one instant: the changes fetched
// and not yet applied (not yet searchable), and the oldest of them.
// Changes the source holds and has not handed over yet are not in it (the
// source's own lag, e.g. Kafka's, counts those), nor are changes applied
// and waiting for their batch's acknowledgement: they are searchable, and
// an acknowledgement that keeps failing is a stall (pipeline.stall_after).
type Backlog struct {
	// Pending counts the changes fetched and not yet applied.
	Pending int
	// OldestAge is how long ago the oldest of them was committed in the
	// source (its commit time, on this host's clock); for a change
	// without a commit time (snapshot reads, backfill, sources without
	// timestamps) how long ago it was fetched. 0 when nothing is pending.
	OldestAge time.Duration
	// Stage is where the oldest pending change is held: BacklogSource,
	// BacklogQueued, BacklogProvider or BacklogSink; "" when nothing is
	// pending.
	Stage string
	// Check names the settings to check for Stage (Config.Settings, as
	// the stall summary prints them); "" when none is known.
	Check string
}

// Backlog reports the pipeline's backlog now. It walks the changes in
// flight (bounded by pipeline.max_in_flight_documents and _bytes) under
// the flow's lock, so it suits a scrape, a probe or a monitor check, not
// a tight loop. Safe for concurrent use; zero when Run is not running.
func (p *Pipeline) Backlog() Backlog {
	f := p.flow.Load()
	if f == nil {
		return Backlog{}
	}
	b := f.backlog(p.now())
	b.Check = p.backlogCheck(b.Stage)
	return b
}

// backlogCheck names the settings behind a stage of the backlog.
func (p *Pipeline) backlogCheck(stage string) string {
	switch stage {
	case BacklogSource:
		// Back-pressure: the work in flight is at its bounds, i.e. the
		// stages after the source are slow; the bounds are what to weigh.
		return "pipeline.max_in_flight_bytes and pipeline.max_in_flight_documents (back-pressure: the work in flight is at its bound, so look at what holds it)"
	case BacklogQueued:
		if p.cfg.Workers > 0 {
			return "pipeline.workers (a cap on changes applied at once)"
		}
		return ""
	case BacklogProvider:
		return p.cfg.Settings[StageEmbedder]
	case BacklogSink:
		return p.cfg.Settings[StageSink]
	}
	return ""
}

// mark records that w entered a stage; nil w (a write outside the flow)
// records nothing. Cheap enough for every call of the write path: one
// atomic store, no allocation.
func (w *work) mark(stage uint32) {
	if w != nil {
		w.stage.Store(stage)
	}
}

// handedLocked notes that the next message of t was handed over (submitted
// or finished without an apply), so the backlog no longer counts it as
// held at the source. Called with mu held.
func (f *flow) handedLocked(t *tracked) {
	t.handed++
	if t.handed >= len(t.records) {
		t.records = nil // every message is handed over: do not hold them
	}
}

// backlog walks what the flow holds: the messages of fetched batches not
// handed over yet, and the changes handed over and not yet applied.
func (f *flow) backlog(now time.Time) Backlog {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b Backlog
	var oldest time.Time
	consider := func(at time.Time, stage string) {
		if oldest.IsZero() || at.Before(oldest) {
			oldest, b.Stage = at, stage
		}
	}
	for _, l := range f.lanes {
		for _, t := range l.batches {
			if n := len(t.records) - t.handed; n > 0 {
				b.Pending += n
				// Within a batch the messages are in source order: the
				// first not handed over is its oldest.
				consider(recordTime(t.records[t.handed], t.fetched), BacklogSource)
			}
		}
	}
	for _, q := range f.docs {
		for _, w := range q {
			b.Pending++
			consider(w.since(), backlogStages[w.stage.Load()])
		}
	}
	for _, ts := range f.tables {
		// Waiting behind a truncate: not yet in docs.
		for _, w := range ts.waiting {
			b.Pending++
			consider(w.since(), BacklogQueued)
		}
	}
	if b.Pending > 0 {
		b.OldestAge = max(0, now.Sub(oldest))
	}
	return b
}

// since is when w's change was committed in the source, or fetched when
// it has no commit time (see commitTime).
func (w *work) since() time.Time { return commitTime(w.change, w.fetched) }

// recordTime is m's commit time when the source decoded it, else fetched
// (a record without a change is one to set aside).
func recordTime(m cdc.Record, fetched time.Time) time.Time {
	if m.Change == nil {
		return fetched
	}
	return commitTime(*m.Change, fetched)
}

// commitTime is ch's commit time in the source, or fetched for a change
// without one. Snapshot reads carry the snapshot's time, which a long
// backfill holds for hours: counted from their fetch instead, as the
// freshness histogram leaves them out.
func commitTime(ch cdc.Change, fetched time.Time) time.Time {
	if ch.Version.TS == 0 || ch.Version.Snapshot || ch.Op == cdc.OpRead {
		return fetched
	}
	return ch.Version.Time()
}

// newBacklogGauges are ragsync_pipeline_backlog_changes and
// ragsync_pipeline_backlog_oldest_seconds, labelled by source and index
// as the freshness histogram is.
func newBacklogGauges(cfg Config, backlog func() Backlog) []prometheus.Collector {
	labels := prometheus.Labels{"source": cfg.SourceName, "index": cfg.IndexName}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ragsync_pipeline_backlog_changes",
			Help:        "Changes fetched and not yet applied (not yet searchable).",
			ConstLabels: labels,
		}, func() float64 { return float64(backlog().Pending) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "ragsync_pipeline_backlog_oldest_seconds",
			Help:        "Age of the oldest change fetched and not yet applied: since its commit in the source, or its fetch when it has no commit time (snapshot reads); 0 when none. Past freshness.degraded_after, /readyz answers degraded.",
			ConstLabels: labels,
		}, func() float64 { return backlog().OldestAge.Seconds() }),
	}
}
