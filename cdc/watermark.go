package cdc

import (
	"context"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Position kinds: how a source names a place in its stream.
const (
	// PositionLSN is a Postgres WAL position, written as pg_lsn is
	// ("16/B374D848"), so that an application can compare it with
	// pg_current_wal_lsn().
	PositionLSN = "lsn"
	// PositionOffset is a Kafka record: "topic/partition/offset".
	PositionOffset = "offset"
	// PositionLine is a line of a Debezium JSON Lines file (1-based).
	PositionLine = "line"
	// PositionEntry is a Redis Stream entry: "stream/ms-seq".
	PositionEntry = "entry"
)

// Mark is the watermark of one lane of a source: every change of the lane
// at or before Position is searchable (its rows and vectors committed),
// and so is every change committed at or before Through. A source hands
// marks out only for what was acknowledged, and acknowledgements follow
// the sink's commits, so a mark never claims a change that a search
// cannot see yet.
type Mark struct {
	// Source names the stream: "pg:<system id>/<database>" for the
	// Postgres source, "kafka:<group>", "file:<path>", "redis:<group>".
	Source string
	// Kind is the position kind (PositionLSN, PositionOffset, ...).
	Kind string
	// Lane is the independently ordered part of the stream the position
	// belongs to: "" for a Postgres slot or a file, "topic/partition" for
	// Kafka, the stream's key for Redis Streams.
	Lane string
	// Position is the lane's position as a user writes it (the same
	// syntax --after reads), and Ord the same position as a number that
	// orders the lane (an LSN, an offset, a line; a Redis entry id's
	// milliseconds × 2^64 + its sequence number).
	Position string
	Ord      *big.Int
	// Commit is the source commit time of the newest change at or before
	// Position; zero when unknown.
	Commit time.Time
	// Through is the time watermark: every change of the lane committed at
	// or before it is searchable, as far as the source can tell (a change
	// that has not reached the transport yet, say Debezium's own
	// latency, is not known to it). It passes Commit when the lane is
	// caught up: nothing is pending, so the time the source last saw its
	// end counts. Zero when unknown.
	Through time.Time
	// CaughtUp says nothing of the lane was pending when the mark was
	// taken.
	CaughtUp bool
}

// Same reports whether m and o name the same position and times.
func (m Mark) Same(o Mark) bool {
	return m.Source == o.Source && m.Kind == o.Kind && m.Lane == o.Lane && m.Position == o.Position &&
		m.Commit.Equal(o.Commit) && m.Through.Equal(o.Through) && m.CaughtUp == o.CaughtUp
}

// CommitSlack is how far a time watermark derived from commit times stays
// behind them. A transaction stamps its commit time just before it writes
// its commit record, and concurrent ones can write theirs in another order
// than they stamped, so for a moment a commit stamped earlier can follow
// one stamped later in the stream. Positions have no such window: they
// are exact.
const CommitSlack = 100 * time.Millisecond

// Watermarker is a source that can say how far it has acknowledged. Marks
// is called after acknowledgements and periodically (an idle source's
// marks move too: a Postgres slot's server position, a caught-up Kafka
// partition's time); it returns one mark per lane it knows.
type Watermarker interface {
	Marks(ctx context.Context) ([]Mark, error)
}

// LSNString writes lsn as Postgres writes a pg_lsn.
func LSNString(lsn uint64) string {
	return fmt.Sprintf("%X/%X", uint32(lsn>>32), uint32(lsn))
}

// LSNMark is the mark of a Postgres source at lsn.
func LSNMark(source string, lsn uint64, commit, through time.Time, caughtUp bool) Mark {
	return Mark{Source: source, Kind: PositionLSN, Position: LSNString(lsn), Ord: new(big.Int).SetUint64(lsn),
		Commit: commit, Through: through, CaughtUp: caughtUp}
}

// OffsetMark is the mark of a Kafka partition whose record at offset was
// the last applied.
func OffsetMark(source, topic string, partition int32, offset int64, commit, through time.Time, caughtUp bool) Mark {
	lane := topic + "/" + strconv.Itoa(int(partition))
	return Mark{Source: source, Kind: PositionOffset, Lane: lane, Position: lane + "/" + strconv.FormatInt(offset, 10),
		Ord: big.NewInt(offset), Commit: commit, Through: through, CaughtUp: caughtUp}
}

// LineMark is the mark of a file whose line was the last applied.
func LineMark(source string, line int64, commit, through time.Time, caughtUp bool) Mark {
	return Mark{Source: source, Kind: PositionLine, Position: strconv.FormatInt(line, 10), Ord: big.NewInt(line),
		Commit: commit, Through: through, CaughtUp: caughtUp}
}

// EntryMark is the mark of a Redis Stream whose entries up to ms-seq are
// applied.
func EntryMark(source, stream string, ms, seq uint64, commit, through time.Time, caughtUp bool) Mark {
	return Mark{Source: source, Kind: PositionEntry, Lane: stream, Position: fmt.Sprintf("%s/%d-%d", stream, ms, seq),
		Ord: entryOrd(ms, seq), Commit: commit, Through: through, CaughtUp: caughtUp}
}

func entryOrd(ms, seq uint64) *big.Int {
	o := new(big.Int).SetUint64(ms)
	o.Lsh(o, 64)
	return o.Add(o, new(big.Int).SetUint64(seq))
}

// After is what a reader waits for before it searches: positions (every
// one must be passed by its lane's mark) or a time (every lane of the
// index's source must be through it).
type After struct {
	// Positions are the positions to wait for; empty with a time.
	Positions []Mark
	// Time is the commit time to wait for; zero with positions.
	Time time.Time
	// Text is what was parsed, for messages.
	Text string
}

var (
	lsnRE    = regexp.MustCompile(`^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$`)
	offsetRE = regexp.MustCompile(`^(.+)/([0-9]+)/([0-9]+)$`)
	entryRE  = regexp.MustCompile(`^(.+)/([0-9]+)-([0-9]+)$`)
	lineRE   = regexp.MustCompile(`^[0-9]+$`)
)

// ParseAfter reads what --after and the front door's after field take:
//
//   - a Postgres WAL position, as pg_current_wal_lsn() prints it
//     ("16/B374D848");
//   - a Kafka record, "topic/partition/offset";
//   - a Redis Stream entry, "stream/1700000000000-0";
//   - a line of a Debezium JSON Lines file, "1234";
//   - a time, RFC 3339 ("2026-12-07T10:04:05.123Z"): every change
//     committed at or before it.
//
// Several positions may be given, separated by commas (a change of each
// of several partitions); a time stands alone.
func ParseAfter(s string) (After, error) {
	s = strings.TrimSpace(s)
	a := After{Text: s}
	if s == "" {
		return a, fmt.Errorf("after: empty; give a position (16/B374D848, topic/partition/offset, stream/ms-seq, a line number) or an RFC 3339 time")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		a.Time = t
		return a, nil
	}
	for _, part := range strings.Split(s, ",") {
		m, err := parsePosition(strings.TrimSpace(part))
		if err != nil {
			return After{}, err
		}
		a.Positions = append(a.Positions, m)
	}
	return a, nil
}

func parsePosition(s string) (Mark, error) {
	if g := lsnRE.FindStringSubmatch(s); g != nil {
		hi, _ := strconv.ParseUint(g[1], 16, 32)
		lo, _ := strconv.ParseUint(g[2], 16, 32)
		return LSNMark("", hi<<32|lo, time.Time{}, time.Time{}, false), nil
	}
	if g := offsetRE.FindStringSubmatch(s); g != nil {
		p, err1 := strconv.ParseInt(g[2], 10, 32)
		off, err2 := strconv.ParseInt(g[3], 10, 64)
		if err1 == nil && err2 == nil {
			return OffsetMark("", g[1], int32(p), off, time.Time{}, time.Time{}, false), nil
		}
	}
	if g := entryRE.FindStringSubmatch(s); g != nil {
		ms, err1 := strconv.ParseUint(g[2], 10, 64)
		seq, err2 := strconv.ParseUint(g[3], 10, 64)
		if err1 == nil && err2 == nil {
			return EntryMark("", g[1], ms, seq, time.Time{}, time.Time{}, false), nil
		}
	}
	if lineRE.MatchString(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			return LineMark("", n, time.Time{}, time.Time{}, false), nil
		}
	}
	return Mark{}, fmt.Errorf("after: %q is neither a position (a Postgres LSN such as 16/B374D848, a Kafka topic/partition/offset, a Redis stream/ms-seq, a file line number) nor an RFC 3339 time such as 2026-12-07T10:04:05Z", s)
}

// Passed reports whether the index's marks pass a, and for a position not
// passed, the mark that holds it (or a description of what is missing).
//
// A position is passed by a mark of its kind and lane whose Ord is at or
// past it; a lane no mark names is not passed (its changes may not have
// arrived). A time is passed when every lane of the index's current
// source is through it; the current source is the one whose mark was
// written last (updated names when each mark was written), so a source
// the index no longer follows does not hold time waits back for ever.
func (a After) Passed(marks []Mark, updated []time.Time) (bool, string) {
	if len(a.Positions) > 0 {
		for _, want := range a.Positions {
			ok, why := positionPassed(want, marks)
			if !ok {
				return false, why
			}
		}
		return true, ""
	}
	if len(marks) == 0 {
		return false, "no watermark yet (nothing acknowledged into this index)"
	}
	cur, last := "", time.Time{}
	for i, m := range marks {
		if i < len(updated) && (cur == "" || updated[i].After(last)) {
			cur, last = m.Source, updated[i]
		}
	}
	if cur == "" {
		cur = marks[0].Source
	}
	for _, m := range marks {
		if m.Source != cur {
			continue
		}
		if m.Through.IsZero() || m.Through.Before(a.Time) {
			lane := m.Lane
			if lane == "" {
				lane = m.Source
			}
			return false, fmt.Sprintf("%s is through %s", lane, formatThrough(m.Through))
		}
	}
	return true, ""
}

func formatThrough(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func positionPassed(want Mark, marks []Mark) (bool, string) {
	var seen *Mark
	for i, m := range marks {
		if m.Kind != want.Kind || m.Lane != want.Lane || m.Ord == nil {
			continue
		}
		if m.Ord.Cmp(want.Ord) >= 0 {
			return true, ""
		}
		if seen == nil || m.Ord.Cmp(seen.Ord) > 0 {
			seen = &marks[i]
		}
	}
	if seen == nil {
		what := want.Kind + " positions"
		if want.Lane != "" {
			what = want.Lane
		}
		return false, fmt.Sprintf("no watermark for %s in this index", what)
	}
	return false, fmt.Sprintf("the watermark is at %s, short of %s", seen.Position, want.Position)
}
