package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// flow is the pipeline's state while Run runs: the batches fetched and not
// yet acknowledged, per lane and in fetch order; the changes handed to
// documents and not yet applied; and what they cost.
//
// The shape is Kafka Connect's and franz-go's commit marks: the fetcher
// keeps fetching while earlier changes are applied (there is no batch
// barrier), every document's changes are applied one after another in
// source order, and a lane's batch is acknowledged once it and every batch
// fetched before it in the lane are complete (the contiguous prefix), so a
// crash at any instant replays only what was not acknowledged, and version
// fencing makes the replay of anything applied a no-op.
type flow struct {
	p *Pipeline

	mu sync.Mutex
	// lanes holds, per Batch.Lane, the batches not yet acknowledged, in
	// fetch order. A lane disappears once empty.
	lanes map[string]*lane
	// docs holds, per document (or per table, for a truncate), the changes
	// handed over and not yet applied, in source order; the first is being
	// applied by the document's runner. Its size is the documents in flight.
	docs map[string][]*work
	// tables orders truncates against the other changes of their table.
	tables map[string]*tableState
	// bytes is the cost of the changes handed over and not yet finished,
	// and of the documents applying them (see documentCost).
	bytes int64
	// seq numbers batches in fetch order; oldest is the seq of the oldest
	// batch not acknowledged (0: none), for the stall check.
	seq, oldest uint64
	// acking is the oldest batch taken from its lane to be acknowledged
	// and not acknowledged yet (nil: none): until its acknowledgement
	// returns it is still the oldest batch in flight, so a source whose
	// acknowledgement keeps failing is a stall like any other.
	acking *tracked

	// room is signalled when work finishes (the fetcher may be waiting for
	// room), ackable when a batch may have become acknowledgeable.
	room, ackable chan struct{}
	// slots caps the changes applied at once when Config.Workers is set;
	// nil leaves concurrency to the cost bounds.
	slots chan struct{}

	runners sync.WaitGroup
	// ctx is the context of the runners; cancel stops them with the first
	// failure.
	ctx    context.Context
	cancel context.CancelCauseFunc
	errMu  sync.Mutex
	err    error
}

// lane is one independently acknowledged sequence of batches.
type lane struct{ batches []*tracked }

// tracked is a fetched batch: how many of its messages are not finished,
// and its acknowledgement.
type tracked struct {
	seq     uint64
	lane    string
	left    int
	ack     func(context.Context) error
	fetched time.Time
	// records are the batch's messages while some are not handed over
	// yet, and handed how many are, for the backlog (see handedLocked).
	records []cdc.Record
	handed  int
}

// work is one decoded change on its way through the pipeline.
type work struct {
	msg    cdc.Record
	change cdc.Change
	batch  *tracked
	cost   int64
	// key is the ordering key: the document's id, or the table for a
	// truncate.
	key string
	// fetched is when the change's batch was fetched.
	fetched time.Time
	// stage is where the change is held, for the backlog: an index of
	// backlogStages, set by the write path as it goes (see work.mark).
	stage atomic.Uint32
}

// tableState holds a table's truncate ordering: a truncate waits for every
// earlier change of its table, and every later change of the table waits
// for the truncate; other tables are not held.
type tableState struct {
	// active counts the table's changes handed to documents and not yet
	// applied.
	active int
	// waiting holds changes that may not start yet, in source order: the
	// first is a truncate waiting for active to drain, or a change
	// waiting for a running truncate.
	waiting []*work
	// truncating is set while a truncate of the table runs.
	truncating bool
}

func newFlow(ctx context.Context, p *Pipeline) *flow {
	f := &flow{
		p:       p,
		lanes:   map[string]*lane{},
		docs:    map[string][]*work{},
		tables:  map[string]*tableState{},
		room:    make(chan struct{}, 1),
		ackable: make(chan struct{}, 1),
	}
	if p.cfg.Workers > 0 {
		f.slots = make(chan struct{}, p.cfg.Workers)
	}
	f.ctx, f.cancel = context.WithCancelCause(ctx)
	return f
}

// signal wakes whoever waits on c, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fail records the first failure and stops the runners and the fetcher.
func (f *flow) fail(err error) {
	f.errMu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.errMu.Unlock()
	f.cancel(err)
}

func (f *flow) failure() error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.err
}

// admit registers a fetched batch in its lane, with every message
// outstanding, and returns its tracker. Its messages are charged one by
// one as they are handed over (submit), each after waiting for room, so a
// batch larger than the bounds does not pass them: the bounds then hold to
// within one change (and the fetched batch not yet handed over, which the
// source's own limits bound, e.g. source.kafka.max_poll_records).
func (f *flow) admit(b cdc.Batch, now time.Time) *tracked {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &tracked{seq: f.seq, lane: b.Lane, left: len(b.Records), ack: b.Ack, fetched: now, records: b.Records}
	l := f.lanes[b.Lane]
	if l == nil {
		l = &lane{}
		f.lanes[b.Lane] = l
	}
	l.batches = append(l.batches, t)
	if f.oldest == 0 {
		f.oldest = t.seq
	}
	if t.left == 0 {
		signal(f.ackable)
	}
	return t
}

// finishedLocked marks one message of t done (applied, skipped or
// dead-lettered) and releases its cost. Called with mu held.
func (f *flow) finishedLocked(t *tracked, cost int64) {
	f.bytes -= cost
	t.left--
	if t.left == 0 {
		signal(f.ackable)
	}
	signal(f.room)
}

// skip marks a message that needs no apply (skipped, dead-lettered at
// decode) as finished; it was never charged.
func (f *flow) skip(t *tracked) {
	f.mu.Lock()
	f.handedLocked(t)
	f.finishedLocked(t, 0)
	f.mu.Unlock()
}

// submit hands a change to its document, behind the document's earlier
// changes and, for its table, behind a pending truncate.
func (f *flow) submit(w *work) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handedLocked(w.batch)
	f.bytes += w.cost
	ts := f.tables[w.change.Table]
	if ts == nil {
		ts = &tableState{}
		f.tables[w.change.Table] = ts
	}
	ts.waiting = append(ts.waiting, w)
	f.pumpLocked(w.change.Table, ts)
}

// pumpLocked starts the table's waiting changes that may start: every
// change up to the next truncate, and a truncate once nothing earlier of
// its table is in flight.
func (f *flow) pumpLocked(table string, ts *tableState) {
	for len(ts.waiting) > 0 && !ts.truncating {
		w := ts.waiting[0]
		if w.change.Op == cdc.OpTruncate {
			if ts.active > 0 {
				return
			}
			ts.truncating = true
		}
		ts.waiting[0] = nil
		ts.waiting = ts.waiting[1:]
		ts.active++
		f.enqueueLocked(w)
	}
	if ts.active == 0 && len(ts.waiting) == 0 {
		delete(f.tables, table)
	}
}

// enqueueLocked puts w behind its document's changes, starting a runner
// for the document when it had none.
func (f *flow) enqueueLocked(w *work) {
	q, running := f.docs[w.key]
	f.docs[w.key] = append(q, w)
	if running {
		return
	}
	f.bytes += documentCost
	f.runners.Add(1)
	go f.run(w.key)
}

// run applies a document's changes one after another until none is left.
// A failure stops the flow; the document's remaining changes are then not
// applied and their batches never acknowledged.
func (f *flow) run(key string) {
	defer f.runners.Done()
	for {
		f.mu.Lock()
		q := f.docs[key]
		if len(q) == 0 {
			delete(f.docs, key)
			f.bytes -= documentCost
			signal(f.room)
			f.mu.Unlock()
			return
		}
		w := q[0]
		f.mu.Unlock()
		// A delete takes no slot: it embeds nothing, and must not wait
		// behind edits of other documents (see deletesFirst).
		slot := f.slots != nil && w.change.Op != cdc.OpDelete
		if slot {
			select {
			case f.slots <- struct{}{}:
			case <-f.ctx.Done():
				return
			}
		}
		err := f.p.applyOne(f.ctx, w)
		if slot {
			<-f.slots
		}
		if err != nil {
			f.fail(err)
			return
		}
		f.mu.Lock()
		q = f.docs[key]
		q[0] = nil
		f.docs[key] = q[1:]
		ts := f.tables[w.change.Table]
		ts.active--
		if w.change.Op == cdc.OpTruncate {
			ts.truncating = false
		}
		f.pumpLocked(w.change.Table, ts)
		f.finishedLocked(w.batch, w.cost)
		f.mu.Unlock()
	}
}

// full reports whether the work in flight reached a bound: fetching waits
// then (back-pressure).
func (f *flow) full() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes >= int64(f.p.cfg.MaxInFlightBytes) || len(f.docs) >= f.p.cfg.MaxInFlightDocuments
}

// waitRoom blocks while the work in flight is at a bound, and reports how
// long it waited. It returns early when the flow stops.
func (f *flow) waitRoom() time.Duration {
	if !f.full() {
		return 0
	}
	start := time.Now()
	for f.full() {
		select {
		case <-f.room:
		case <-f.ctx.Done():
			return time.Since(start)
		}
	}
	return time.Since(start)
}

// outstanding reports whether any batch is not yet acknowledged.
func (f *flow) outstanding() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lanes) > 0
}

// takeAckable removes and returns, lane by lane, the batches at the head
// of their lane whose every message is finished: the contiguous prefix.
func (f *flow) takeAckable() []*tracked {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*tracked
	for name, l := range f.lanes {
		n := 0
		for n < len(l.batches) && l.batches[n].left == 0 {
			out = append(out, l.batches[n])
			n++
		}
		if n == 0 {
			continue
		}
		clear(l.batches[:n])
		l.batches = l.batches[n:]
		if len(l.batches) == 0 {
			delete(f.lanes, name)
		}
	}
	if len(out) > 0 {
		f.acking = out[0]
		for _, t := range out[1:] {
			if t.seq < f.acking.seq {
				f.acking = t
			}
		}
		f.oldest = 0
		for _, l := range f.lanes {
			if s := l.batches[0].seq; f.oldest == 0 || s < f.oldest {
				f.oldest = s
			}
		}
	}
	return out
}

// oldestFetched is when the oldest batch not acknowledged was fetched, and
// its sequence number (zero time and 0: none).
func (f *flow) oldestFetched() (time.Time, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.acking != nil {
		return f.acking.fetched, f.acking.seq
	}
	for _, l := range f.lanes {
		if l.batches[0].seq == f.oldest {
			return l.batches[0].fetched, f.oldest
		}
	}
	return time.Time{}, 0
}

// acknowledged notes that the batches taken by takeAckable are
// acknowledged.
func (f *flow) acknowledged() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acking = nil
}

// inFlight reports the bytes and documents in flight, for the gauges.
func (f *flow) inFlight() (bytes int64, docs int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bytes, len(f.docs)
}

// documentCost is what a document in flight holds in memory beyond its
// changes' bytes, charged to the bytes in flight from the moment its first
// change is handed over until its last is applied: the goroutine that
// applies it (its stack grows through decode, lookup, the coalescer and
// the sink), the row rendered to text, its chunks and their vectors, and
// the stored state read to compare against, plus the garbage all of this
// leaves for the collector. Measured on the backlog bench (bench/backlog
// -events 20000 -docs 2000: 3-paragraph documents, 256 dimensions, changes
// of ~700 bytes): peak RSS grew by 44-52 KiB per document in flight, part
// of it the collector's headroom (GOGC). With it, max_in_flight_bytes
// bounds an estimate of the memory the work in flight holds, not only its
// raw bytes, and many small changes to distinct documents are bounded by
// what they cost.
const documentCost = 40 << 10

// messageCost is what a message holds in memory while in flight, roughly:
// its bytes, or the size of the values of the change a structured source
// built. What a message decoded by the pipeline holds is added once it is
// decoded (changeCost).
func messageCost(m cdc.Record) int64 {
	n := int64(len(m.Key) + len(m.Value) + 64)
	if m.Change != nil {
		n += changeCost(*m.Change)
	}
	return n
}

// changeCost is what a decoded change's values hold.
func changeCost(ch cdc.Change) int64 {
	return rowCost(ch.After) + rowCost(ch.Before) + rowCost(ch.Key)
}

func rowCost(row map[string]any) int64 {
	var n int64
	for k, v := range row {
		n += int64(len(k)) + 16
		switch x := v.(type) {
		case string:
			n += int64(len(x))
		case []byte:
			n += int64(len(x))
		}
	}
	return n
}
