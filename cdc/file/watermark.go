package file

import (
	"context"
	"sync"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// lineMarks is the file's watermark: the last line applied, the newest
// commit time among the lines applied, and the last time the end of the
// file was reached.
type lineMarks struct {
	mu      sync.Mutex
	line    int64
	commit  time.Time
	through time.Time
	// endLine and endAt: the end of the file was at endLine at endAt.
	endLine int64
	endAt   time.Time
}

func (m *lineMarks) applied(line int64, commitTS uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if line > m.line {
		m.line = line
	}
	if commitTS > 0 {
		if t := time.UnixMilli(int64(commitTS)).UTC(); t.After(m.commit) {
			m.commit = t
		}
	}
	if t := m.commit.Add(-cdc.CommitSlack); t.After(m.through) {
		m.through = t
	}
}

func (m *lineMarks) atEnd(line int64, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endLine, m.endAt = line, at
}

// Marks returns the file's watermark once it has had a line: the last
// line applied, and the time watermark, which passes the newest commit
// applied when every line of the file, as it was when its end was last
// reached, is applied.
func (s *Source) Marks(context.Context) ([]cdc.Mark, error) {
	m := &s.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.line == 0 && m.endLine == 0 {
		return nil, nil // no line yet: nothing to name
	}
	caught := !m.endAt.IsZero() && m.line >= m.endLine
	through := m.through
	if caught && m.endAt.After(through) {
		through = m.endAt
	}
	return []cdc.Mark{cdc.LineMark(s.name, m.line, m.commit, through, caught)}, nil
}
