package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ragsync/ragsync/cdc"
)

// endCheckInterval is how often the end offsets of partitions that look
// caught up are asked for, so that their time watermark follows the clock
// while nothing arrives.
const endCheckInterval = 500 * time.Millisecond

// partMarks are the watermarks of the partitions this member owns.
type partMarks struct {
	mu    sync.Mutex
	parts map[tp]*partMark
	// checking is set while an end-offset request runs; checked is when
	// the last one started.
	checking bool
	checked  time.Time
}

// partMark is one partition's watermark: the last applied offset and the
// newest commit time applied, and the time before the latest request that
// found the partition's end right after the applied offset.
type partMark struct {
	offset  int64
	commit  time.Time
	through time.Time
	// caught is when the end offset was last found at offset+1 (zero: not
	// since the last apply moved it).
	caught time.Time
}

// applied notes that the records of p up to offset, committed at or
// before commitTS (ms; 0 unknown), are acknowledged.
func (m *partMarks) applied(p tp, offset int64, commitTS uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pm := m.parts[p]
	if pm == nil {
		pm = &partMark{offset: -1}
		m.parts[p] = pm
	}
	if offset <= pm.offset {
		return
	}
	pm.offset = offset
	pm.caught = time.Time{}
	if commitTS > 0 {
		if t := time.UnixMilli(int64(commitTS)).UTC(); t.After(pm.commit) {
			pm.commit = t
		}
	}
	if t := pm.commit.Add(-cdc.CommitSlack); t.After(pm.through) {
		pm.through = t
	}
}

// drop forgets revoked partitions: their next owner writes their marks.
func (m *partMarks) drop(parts []tp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range parts {
		delete(m.parts, p)
	}
}

// Marks returns the watermark of every partition this member applied
// records of: the offset of the last record applied, the newest commit
// time among them, and the time watermark. A partition found caught up
// (its end offset right after the applied one, nothing polled and waiting)
// is through the time just before that was asked: every record the topic
// held then is applied. The end offsets of such partitions are asked in
// the background at most every endCheckInterval, so Marks never waits for
// the broker.
func (s *Source) Marks(ctx context.Context) ([]cdc.Mark, error) {
	s.seedMarks()
	s.mu.Lock()
	idle := map[tp]bool{}
	for p := range s.marks.partsSnapshot() {
		idle[p] = len(s.pending[p]) == 0 && s.out[p] == 0
	}
	s.mu.Unlock()
	m := &s.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cdc.Mark
	var check []tp
	for p, pm := range m.parts {
		caught := idle[p] && !pm.caught.IsZero()
		through := pm.through
		if caught && pm.caught.After(through) {
			through = pm.caught
		}
		out = append(out, cdc.OffsetMark("kafka:"+s.group, p.topic, p.part, pm.offset, pm.commit, through, caught))
		if idle[p] {
			check = append(check, p)
		}
	}
	if len(check) > 0 && !m.checking && time.Since(m.checked) >= endCheckInterval {
		m.checking, m.checked = true, time.Now()
		go s.checkEnds(context.WithoutCancel(ctx), check)
	}
	return out, nil
}

// seedMarks gives an assigned partition that this member has applied
// nothing of yet the committed offset as its position, so that one with
// nothing to consume is found caught up too and its time watermark moves
// (a watermark written by an earlier run would hold time waits back).
func (s *Source) seedMarks() {
	committed := s.cl.CommittedOffsets()
	assigned := s.assigned.snapshot()
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			k := tp{t, p}
			if s.marks.parts[k] != nil {
				continue
			}
			if at, ok := committed[t][p]; ok && at.Offset > 0 {
				s.marks.parts[k] = &partMark{offset: at.Offset - 1}
			}
		}
	}
}

func (m *partMarks) partsSnapshot() map[tp]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[tp]bool, len(m.parts))
	for p := range m.parts {
		out[p] = true
	}
	return out
}

// checkEnds asks the end offsets of parts and marks those whose end is
// right after the applied offset as caught up as of before the request.
func (s *Source) checkEnds(ctx context.Context, parts []tp) {
	defer func() {
		s.marks.mu.Lock()
		s.marks.checking = false
		s.marks.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topics := map[string]bool{}
	for _, p := range parts {
		topics[p.topic] = true
	}
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	asked := time.Now()
	ends, err := kadm.NewClient(s.cl).ListEndOffsets(ctx, names...)
	if err != nil {
		return
	}
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	for _, p := range parts {
		pm := s.marks.parts[p]
		if pm == nil {
			continue
		}
		end, ok := ends.Lookup(p.topic, p.part)
		if ok && end.Err == nil && end.Offset == pm.offset+1 && asked.After(pm.caught) {
			pm.caught = asked
		}
	}
}
