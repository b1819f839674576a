package cdc

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Version orders the changes of one document. Kind names the source that
// produced Parts ("pg", "mysql", "sqlserver", "oracle", "mongo", or "ts" for
// the ts_ms fallback of a change without a position); TS is the source
// commit time in ms since the epoch (0: unknown); Snapshot marks a snapshot
// read (op r), which is a copy of a row, not a change of it.
//
// The order (Compare, documented in docs/ordering.md):
//
//  1. Two positional versions of the same kind compare Parts element by
//     element, a shorter tuple that is a prefix of a longer one first; at
//     equal Parts a snapshot read sorts before a streamed change. The
//     source's own position is the only reliable order within it: commit
//     times repeat within a millisecond and clocks step back.
//  2. Otherwise (different kinds, or "ts" versions) the later TS wins, so a
//     snapshot read loses to any change committed after it and one
//     position-less change cannot freeze a document.
//  3. At equal (or unknown) TS a positional version outranks a "ts" one,
//     then kind name, then Parts, then a snapshot read sorts first. So a ts
//     fallback never outranks a real position, and the order stays total.
//
// Every version may name its source (Source, Epoch): the stream whose
// positions Parts are. Positions order changes only within one stream: a
// WAL position of one database says nothing about another database's (the
// LSNs of a cluster are shared by its databases and arbitrary across
// clusters), nor about the same database after a dump/restore or an upgrade
// by logical replication. So, before the rules above:
//
//  0. Two versions that both name a source, and name different ones, are
//     foreign to each other (Foreign): their positions are never compared,
//     only commit times (rule 2), so a source that moved to a server with
//     lower positions is never frozen behind the old server's. Within one
//     source a higher Epoch (a move the source recorded) sorts after any
//     lower one whatever the positions. A version that names no source
//     (written before versions carried one, or by a source that cannot
//     tell) is epoch 0 of an unknown source: it is ordered by rules 1-3
//     against any version, as before, so an upgrade changes no outcome.
//
// Nothing is reconciled across sources: cdc.Outdated only deletes documents
// whose versions name the load's own source (or a source it succeeds), and
// a truncate fences only its own source's changes (see FencedBy).
//
// Two "ts" versions that compare equal are a tie the source cannot break:
// the sink applies the later-arriving one (see Positional), so a tie never
// drops an edit, and a replay of identical content is a no-op because its
// chunk hashes match.
//
// The order is transitive as long as, within each kind, commit times do not
// run backwards against positions, which holds for one document of one
// source; cross-kind comparisons are only as good as the clocks behind TS.
type Version struct {
	Kind  string
	Parts []uint64
	// TS is the source commit time in ms since the Unix epoch (Debezium's
	// source.ts_ms, pgoutput's commit time); 0 when unknown. It is the only
	// copy of a change's commit time.
	TS uint64
	// Snapshot marks the version of a snapshot read (op r, a backfill or
	// an initial load): a copy of a row, not a change of it.
	Snapshot bool
	// Source names the stream Parts are positions of: "pg:<system
	// identifier>/<database>" for the Postgres source and the backfill,
	// "dbz:<server name>/<database>" for a Debezium event. Empty: unknown
	// (a version stored before versions named their source).
	Source string
	// Epoch counts the moves of Source that were adopted (a move to a server
	// whose positions restart); 0 until the first.
	Epoch uint32
}

// Foreign reports whether v and o name different sources, so that neither
// position orders the other and neither may fence, outdate or reconcile
// the other. A version that names no source is foreign to none.
func (v Version) Foreign(o Version) bool {
	return v.Source != "" && o.Source != "" && v.Source != o.Source
}

// regressSlackMS is how much later a change with a lower position of the
// same source must have committed before Regressed calls it a move rather
// than a clock's step back.
const regressSlackMS = 1000

// Regressed reports whether v, a streamed change, sits below stored (a
// version of the same source and epoch) by position while it committed
// more than a second later. Within one server a lower position never
// commits later, so the source's positions restarted: it now reads a
// server that was restored, upgraded or replaced under the same name (a
// Debezium connector keeps its server name across such a move). Such a
// change must not be dropped as stale, nor applied over the old server's
// positions: it waits for the move to be recorded. A snapshot read is never
// regressed: its position is the snapshot's and its time the read's.
func (v Version) Regressed(stored Version) bool {
	return v.Source != "" && v.Source == stored.Source && v.Epoch == stored.Epoch && v.Kind == stored.Kind &&
		v.Positional() && !v.Snapshot && v.TS > stored.TS+regressSlackMS && v.TS != 0 && stored.TS != 0 &&
		compareParts(v.Parts, stored.Parts) < 0
}

// RegressedError is a change whose source's positions went back (see
// Version.Regressed); nothing of it was applied.
type RegressedError struct {
	ID             string
	Change, Stored Version
}

func (e *RegressedError) Error() string {
	at := time.UnixMilli(int64(e.Change.TS)).UTC().Format(time.RFC3339Nano)
	return fmt.Sprintf("document %s: the positions of source %s went back (this change %s is below the stored %s, yet it committed later, at %s): "+
		"the source now reads another server under the same name (a restore, an upgrade, a replacement), and its positions say nothing about the old server's. Nothing was applied. "+
		"Record the move in source.moves (source: %q, at: %q, the commit time of the new server's first change) and restart, then run `ragsync dlq replay` to apply the changes held back",
		e.ID, e.Change.Source, e.Change, e.Stored, at, e.Change.Source, at)
}

// Permanent reports that retrying does not help until the move is recorded.
func (e *RegressedError) Permanent() bool { return true }

// FencedBy reports whether a change at v is fenced out by a truncate at
// fence: only a truncate of v's own source (or of an unknown one) fences,
// and one at or after v (a position-less create tied with the truncate
// arrived after it and wins).
func (v Version) FencedBy(fence Version) bool {
	if v.Foreign(fence) {
		return false
	}
	c := v.Compare(fence)
	return c < 0 || (c == 0 && v.Positional())
}

// Positional reports whether v carries a source position (every kind but
// "ts"). Ties between position-less versions are decided by arrival.
func (v Version) Positional() bool { return v.Kind != KindTS && v.Kind != "" }

// Compare returns -1, 0 or +1 as v sorts before, equal to or after o (see
// Version for the rule).
func (v Version) Compare(o Version) int {
	foreign := v.Foreign(o)
	if !foreign && v.Epoch != o.Epoch {
		return cmp.Compare(v.Epoch, o.Epoch)
	}
	if v.Kind == o.Kind && v.Positional() && !foreign {
		if c := compareParts(v.Parts, o.Parts); c != 0 {
			return c
		}
		return compareSnapshot(v.Snapshot, o.Snapshot)
	}
	if vt, ot := v.time(), o.time(); vt != 0 && ot != 0 && vt != ot {
		return cmp.Compare(vt, ot)
	}
	if c := -compareSnapshot(v.Positional(), o.Positional()); c != 0 {
		return c // a position outranks none
	}
	if c := strings.Compare(v.Kind, o.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(v.Source, o.Source); foreign && c != 0 {
		// Foreign versions at one commit time: any fixed order keeps
		// Compare total, and the source name is one no replay changes.
		return c
	}
	if c := compareParts(v.Parts, o.Parts); c != 0 {
		return c
	}
	return compareSnapshot(v.Snapshot, o.Snapshot)
}

func compareParts(a, b []uint64) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := cmp.Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// compareSnapshot sorts true before false: a snapshot read before a
// streamed change.
func compareSnapshot(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// time is v's commit time in ms: TS, else a ts version's own part.
func (v Version) time() uint64 {
	if v.TS != 0 {
		return v.TS
	}
	if v.Kind == KindTS && len(v.Parts) > 0 {
		return v.Parts[0]
	}
	return 0
}

// IsZero reports whether v carries no ordering information.
func (v Version) IsZero() bool { return v.Kind == "" && len(v.Parts) == 0 }

// Position is the version's place in its source without the commit time,
// the source or the epoch: the kind and the position parts as String
// writes them ("pg:00000000016b3f40.0000000000000232"); "" for a zero version.
func (v Version) Position() string {
	if v.IsZero() {
		return ""
	}
	return Version{Kind: v.Kind, Parts: v.Parts}.String()
}

// String renders v as the sink stores it:
// "pg:00000000016b3f40.0000000000000232;ts=1700000000000;snapshot;src=pg:7316%2F…;epoch=1",
// the ";ts=", ";snapshot", ";src=" and ";epoch=" parts only when set (the
// source with '%' and ';' percent-escaped). Since versions carry a commit time the text no
// longer sorts like Compare across kinds: compare parsed versions, never the
// text.
func (v Version) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	b.WriteByte(':')
	for i, p := range v.Parts {
		if i > 0 {
			b.WriteByte('.')
		}
		fmt.Fprintf(&b, "%016x", p)
	}
	if v.TS != 0 {
		b.WriteString(";ts=")
		b.WriteString(strconv.FormatUint(v.TS, 10))
	}
	if v.Snapshot {
		b.WriteString(";snapshot")
	}
	if v.Source != "" {
		b.WriteString(";src=")
		b.WriteString(sourceEscaper.Replace(v.Source))
	}
	if v.Epoch != 0 {
		b.WriteString(";epoch=")
		b.WriteString(strconv.FormatUint(uint64(v.Epoch), 10))
	}
	return b.String()
}

// ParseVersion is the inverse of Version.String. It also reads the form
// stored by older releases ("kind:hex.hex…", without time or snapshot flag).
func ParseVersion(s string) (Version, error) {
	head, attrs, _ := strings.Cut(s, ";")
	kind, rest, ok := strings.Cut(head, ":")
	if !ok || kind == "" {
		return Version{}, fmt.Errorf("parse version %q: want kind:hex.hex…[;ts=ms][;snapshot]", s)
	}
	v := Version{Kind: kind}
	if rest != "" {
		for _, p := range strings.Split(rest, ".") {
			n, err := strconv.ParseUint(p, 16, 64)
			if err != nil {
				return Version{}, fmt.Errorf("parse version %q: %w", s, err)
			}
			v.Parts = append(v.Parts, n)
		}
	}
	if attrs == "" {
		return v, nil
	}
	for _, a := range strings.Split(attrs, ";") {
		switch {
		case a == "snapshot" && !v.Snapshot:
			v.Snapshot = true
		case strings.HasPrefix(a, "ts=") && v.TS == 0:
			n, err := strconv.ParseUint(a[3:], 10, 64)
			if err != nil || n == 0 {
				return Version{}, fmt.Errorf("parse version %q: bad ts %q", s, a[3:])
			}
			v.TS = n
		case strings.HasPrefix(a, "src=") && v.Source == "" && len(a) > 4:
			src, err := unescapeSource(a[4:])
			if err != nil {
				return Version{}, fmt.Errorf("parse version %q: bad src: %w", s, err)
			}
			v.Source = src
		case strings.HasPrefix(a, "epoch=") && v.Epoch == 0:
			n, err := strconv.ParseUint(a[6:], 10, 32)
			if err != nil || n == 0 {
				return Version{}, fmt.Errorf("parse version %q: bad epoch %q", s, a[6:])
			}
			v.Epoch = uint32(n)
		default:
			return Version{}, fmt.Errorf("parse version %q: unknown or repeated attribute %q", s, a)
		}
	}
	return v, nil
}

var sourceEscaper = strings.NewReplacer("%", "%25", ";", "%3B")

// unescapeSource reverses sourceEscaper.
func unescapeSource(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "%25"):
			b.WriteByte('%')
		case strings.HasPrefix(s[i:], "%3B"):
			b.WriteByte(';')
		default:
			return "", fmt.Errorf("%q: only %%25 and %%3B are escapes", s)
		}
		i += 2
	}
	return b.String(), nil
}

// MarshalText implements encoding.TextMarshaler.
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (v *Version) UnmarshalText(b []byte) error {
	p, err := ParseVersion(string(b))
	if err != nil {
		return err
	}
	*v = p
	return nil
}

// Time is the source commit time TS as a time, zero when unknown.
func (v Version) Time() time.Time {
	if v.TS == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(v.TS)).UTC()
}

// VersionTS is t as a Version's TS: ms since the epoch, 0 for a zero or
// pre-epoch time.
func VersionTS(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(max(t.UnixMilli(), 0))
}
