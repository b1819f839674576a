package cdc_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

func TestParseAfterReadsEveryPositionKind(t *testing.T) {
	cases := []struct {
		in, kind, lane, pos string
	}{
		{"16/B374D848", cdc.PositionLSN, "", "16/B374D848"},
		{"0/0", cdc.PositionLSN, "", "0/0"},
		{"dbserver1.public.articles/3/1234", cdc.PositionOffset, "dbserver1.public.articles/3", "dbserver1.public.articles/3/1234"},
		{"debezium:public.articles/1700000000000-7", cdc.PositionEntry, "debezium:public.articles", "debezium:public.articles/1700000000000-7"},
		{"42", cdc.PositionLine, "", "42"},
	}
	for _, c := range cases {
		a, err := cdc.ParseAfter(c.in)
		if err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		if len(a.Positions) != 1 || !a.Time.IsZero() {
			t.Fatalf("%q: got %+v", c.in, a)
		}
		m := a.Positions[0]
		if m.Kind != c.kind || m.Lane != c.lane || m.Position != c.pos {
			t.Errorf("%q: kind %q lane %q position %q, want %q %q %q", c.in, m.Kind, m.Lane, m.Position, c.kind, c.lane, c.pos)
		}
	}
	a, err := cdc.ParseAfter("t/0/5, t/1/9")
	if err != nil || len(a.Positions) != 2 {
		t.Fatalf("two positions: %+v, %v", a, err)
	}
	a, err = cdc.ParseAfter("2026-12-07T10:04:05.123Z")
	if err != nil || a.Time.UnixMilli() != time.Date(2026, 12, 7, 10, 4, 5, 123e6, time.UTC).UnixMilli() || len(a.Positions) != 0 {
		t.Fatalf("time: %+v, %v", a, err)
	}
	for _, bad := range []string{"", "yesterday", "t/x/5", "16/B374D848Z", "2026-12-07"} {
		if _, err := cdc.ParseAfter(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		} else if bad != "" && !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("%q: the error should say what is accepted: %v", bad, err)
		}
	}
}

func TestLSNPositionsOrderAsPostgresDoes(t *testing.T) {
	// 1/0 is past FFFFFFFF/… of the low word: the order is the LSN's, not
	// the text's.
	lo := cdc.LSNMark("pg:1/db", 0x0_FFFFFFFF, time.Time{}, time.Time{}, false)
	hi := cdc.LSNMark("pg:1/db", 0x1_00000000, time.Time{}, time.Time{}, false)
	if lo.Position != "0/FFFFFFFF" || hi.Position != "1/0" {
		t.Fatalf("positions %q %q", lo.Position, hi.Position)
	}
	a, _ := cdc.ParseAfter("0/FFFFFFFF")
	if ok, _ := a.Passed([]cdc.Mark{hi}, nil); !ok {
		t.Error("1/0 must pass 0/FFFFFFFF")
	}
	a, _ = cdc.ParseAfter("1/0")
	if ok, why := a.Passed([]cdc.Mark{lo}, nil); ok || !strings.Contains(why, "0/FFFFFFFF") {
		t.Errorf("0/FFFFFFFF must not pass 1/0 (%s)", why)
	}
}

func TestAfterPassedNeedsEveryPositionsLane(t *testing.T) {
	marks := []cdc.Mark{
		cdc.OffsetMark("kafka:g", "t", 0, 10, time.Time{}, time.Time{}, false),
		cdc.OffsetMark("kafka:g", "t", 1, 3, time.Time{}, time.Time{}, false),
	}
	check := func(after string, want bool) {
		t.Helper()
		a, err := cdc.ParseAfter(after)
		if err != nil {
			t.Fatal(err)
		}
		if got, why := a.Passed(marks, nil); got != want {
			t.Errorf("%s: passed %v, want %v (%s)", after, got, want, why)
		}
	}
	check("t/0/10", true)
	check("t/0/11", false)
	check("t/1/3,t/0/2", true)
	check("t/1/4,t/0/2", false)
	check("t/2/0", false)      // a partition with no mark has not arrived
	check("u/0/1", false)      // another topic
	check("0/A", false)        // another kind of position
	check("t/0/1,t/1/3", true) // both passed
	check("t/0/1,t/1/30", false)
}

func TestAfterTimeWaitsForEveryLaneOfTheCurrentSource(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	marks := []cdc.Mark{
		cdc.OffsetMark("kafka:g", "t", 0, 10, t0, t0.Add(5*time.Second), false),
		cdc.OffsetMark("kafka:g", "t", 1, 3, t0, t0.Add(2*time.Second), false),
		// A file replayed into the index long ago: not the current source.
		cdc.LineMark("file:/old.jsonl", 9, t0.Add(-time.Hour), t0.Add(-time.Hour), true),
	}
	updated := []time.Time{t0.Add(time.Minute), t0.Add(time.Minute), t0.Add(-time.Hour)}
	a := cdc.After{Time: t0.Add(2 * time.Second)}
	if ok, why := a.Passed(marks, updated); !ok {
		t.Errorf("every lane is through %s: %s", a.Time, why)
	}
	a = cdc.After{Time: t0.Add(3 * time.Second)}
	if ok, why := a.Passed(marks, updated); ok || !strings.Contains(why, "t/1") {
		t.Errorf("lane t/1 is only through +2s: passed %v (%s)", ok, why)
	}
	// A lane whose time is unknown never passes a time.
	unknown := []cdc.Mark{cdc.LSNMark("pg:1/db", 100, time.Time{}, time.Time{}, false)}
	if ok, _ := (cdc.After{Time: t0}).Passed(unknown, []time.Time{t0}); ok {
		t.Error("a lane with no time watermark passed a time")
	}
	if ok, why := (cdc.After{Time: t0}).Passed(nil, nil); ok || why == "" {
		t.Error("no marks at all passed a time")
	}
}
