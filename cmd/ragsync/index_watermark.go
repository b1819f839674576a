package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/ragsync/ragsync/sink"
)

// laneJSON is one lane of a source's watermark in index status --json.
type laneJSON struct {
	Lane      string     `json:"lane"`
	Position  string     `json:"position"`
	Committed *time.Time `json:"committed_at"`
	Through   *time.Time `json:"through"`
	CaughtUp  bool       `json:"caught_up"`
	Writer    string     `json:"writer"`
	Updated   time.Time  `json:"updated_at"`
}

// sourceWatermark is the watermark of one source of an index, as the
// index's watermark view shows it: its lanes, their position when there is
// one lane, the oldest lane's time (every change committed at or before it
// is searchable), how old that is, and whether every lane was caught up.
type sourceWatermark struct {
	Source    string     `json:"source"`
	Kind      string     `json:"kind"`
	Lanes     int        `json:"lanes"`
	Position  *string    `json:"position"` // one lane only; see lane_marks
	Through   *time.Time `json:"through"`
	Committed *time.Time `json:"committed_at"`
	// Age is now − Through in seconds; null when the time is unknown.
	Age       *float64   `json:"age_seconds"`
	CaughtUp  bool       `json:"caught_up"`
	Updated   time.Time  `json:"updated_at"`
	LaneMarks []laneJSON `json:"lane_marks"`
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// sourceWatermarks groups an index's stored marks by source and kind.
func sourceWatermarks(marks []sink.StoredMark, now time.Time) []sourceWatermark {
	out := []sourceWatermark{}
	at := map[string]int{}
	for _, m := range marks {
		key := m.Source + "\x00" + m.Kind
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, sourceWatermark{Source: m.Source, Kind: m.Kind, CaughtUp: true})
		}
		w := &out[i]
		w.Lanes++
		w.LaneMarks = append(w.LaneMarks, laneJSON{Lane: m.Lane, Position: m.Position, Committed: timeOrNil(m.Commit),
			Through: timeOrNil(m.Through), CaughtUp: m.CaughtUp, Writer: m.Writer, Updated: m.Updated.UTC()})
		w.CaughtUp = w.CaughtUp && m.CaughtUp
		if m.Updated.After(w.Updated) {
			w.Updated = m.Updated.UTC()
		}
		if c := timeOrNil(m.Commit); c != nil && (w.Committed == nil || c.After(*w.Committed)) {
			w.Committed = c
		}
	}
	for i := range out {
		w := &out[i]
		if w.Lanes == 1 {
			p := w.LaneMarks[0].Position
			w.Position = &p
		}
		// The source's time is its oldest lane's; a lane of unknown time
		// makes it unknown.
		for j, l := range w.LaneMarks {
			if l.Through == nil {
				w.Through = nil
				break
			}
			if j == 0 || l.Through.Before(*w.Through) {
				w.Through = l.Through
			}
		}
		if w.Through != nil {
			age := now.Sub(*w.Through).Seconds()
			w.Age = &age
		}
	}
	return out
}

// printWatermarks prints the watermark lines of index status.
func printWatermarks(out io.Writer, ws []sourceWatermark) error {
	fmt.Fprintln(out)
	if len(ws) == 0 {
		_, err := fmt.Fprintln(out, "watermark: none yet (no change acknowledged into this index since it records watermarks)")
		return err
	}
	fmt.Fprintln(out, "WATERMARK")
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tKIND\tLANES\tPOSITION\tTHROUGH\tAGE\tCAUGHT UP")
	for _, w := range ws {
		pos := "(--json lists the lanes)"
		if w.Position != nil {
			pos = *w.Position
		}
		through, age := "unknown", "unknown"
		if w.Through != nil {
			through = w.Through.Format(time.RFC3339Nano)
			age = (time.Duration(*w.Age * float64(time.Second))).Round(time.Millisecond).String()
		}
		caught := "no"
		if w.CaughtUp {
			caught = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", w.Source, w.Kind, w.Lanes, pos, through, age, caught)
	}
	return tw.Flush()
}
