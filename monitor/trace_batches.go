package monitor

import (
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// maxWorst is how many slow or failed changes an event names.
const maxWorst = 5

type slowTrace struct {
	id      trace.TraceID
	seconds float64
	failed  bool
}

// worse orders failed before slow, then by time.
func (a slowTrace) worse(b slowTrace) bool {
	if a.failed != b.failed {
		return a.failed
	}
	return a.seconds > b.seconds
}

// worstTraces keeps the slowest and failed changes since the previous
// check and in the interval before it, each as a top-maxWorst list, so
// memory is bounded and an old slow change leaves after two checks instead
// of hiding newer ones. It has its own lock, not Monitor.mu: a check holds
// that one across embedding calls and queries, and the pipeline's workers
// must never wait for a check.
type worstTraces struct {
	mu        sync.Mutex
	cur, prev []slowTrace // worst first
}

// RecordTrace notes a change's trace id, apply time and failure (a failed
// change ranks above every slow one), so the events of the next two checks
// name the worst recent ones. It implements pipeline.TraceRecorder: safe
// for concurrent use, it takes a lock of its own for a few comparisons and
// never does I/O.
func (m *Monitor) RecordTrace(id trace.TraceID, d time.Duration, failed bool) {
	if !id.IsValid() {
		return
	}
	m.worst.add(slowTrace{id: id, seconds: d.Seconds(), failed: failed})
}

func (w *worstTraces) add(t slowTrace) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur = insertWorst(w.cur, t)
}

// insertWorst puts t in its place in list (worst first, at most maxWorst,
// one entry per trace id: a retried or replayed message is named once, at
// its worst).
func insertWorst(list []slowTrace, t slowTrace) []slowTrace {
	for i, o := range list {
		if o.id == t.id {
			if !t.worse(o) {
				return list
			}
			list = slices.Delete(list, i, i+1)
			break
		}
	}
	if len(list) == maxWorst && !t.worse(list[maxWorst-1]) {
		return list
	}
	i := len(list)
	for i > 0 && t.worse(list[i-1]) {
		i--
	}
	list = slices.Insert(list, i, t)
	if len(list) > maxWorst {
		list = list[:maxWorst]
	}
	return list
}

// rotate returns the trace ids of the worst changes since the check
// before the previous one, worst first, and starts a new interval.
func (w *worstTraces) rotate() []string {
	w.mu.Lock()
	merged := slices.Clone(w.cur)
	for _, t := range w.prev {
		merged = insertWorst(merged, t)
	}
	w.prev, w.cur = w.cur, nil
	w.mu.Unlock()
	out := make([]string, 0, len(merged))
	for _, t := range merged {
		out = append(out, t.id.String())
	}
	return out
}
