package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// A file source's watermark is its last applied line: query --after a
// line the index holds searches, a line past the file's end fails with
// "not yet" and exit 6 after --after-timeout, printing no hits (and, with
// --json, one machine-readable not_yet line), and a malformed --after
// names what it accepts.
func TestQueryAfterWaitsForTheWatermark(t *testing.T) {
	e := newReindexEnv(t)
	e.serveOut(nil, noteEvent("c", 1, 10, "First note, about apples."), noteEvent("c", 2, 11, "Second note, about pears."),
		noteEvent("c", 3, 12, "Third note, about plums."))

	out, err := runCLI(t, "", e.args("query", "plums", "--json", "--after", "3", "--after-timeout", "0")...)
	require.NoError(t, err, out)
	require.Contains(t, out, `"doc_id":"public.notes/3"`)
	require.NotContains(t, out, "not_yet")

	out, err = runCLI(t, "", e.args("query", "plums", "--after", "4", "--after-timeout", "300ms")...)
	require.Error(t, err)
	require.Equal(t, ExitNotYet, exitCode(err), out)
	require.True(t, strings.HasPrefix(err.Error(), "not yet:"), err.Error())
	require.Contains(t, err.Error(), "the watermark is at 3, short of 4")
	require.NotContains(t, out, "notes/3", "no hits when the index may not hold the change")
	require.NotContains(t, out, "no results", "not yet is not an empty answer")

	out, err = runCLI(t, "", e.args("query", "plums", "--json", "--after", "4", "--after-timeout", "0")...)
	require.Equal(t, ExitNotYet, exitCode(err), out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var ny notYetJSON
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &ny), out)
	require.Equal(t, notYetJSON{Status: "not_yet", After: "4", Why: "the watermark is at 3, short of 4"}, ny)
	require.NotContains(t, out, `"doc_id"`)

	// A time: every change committed at or before it; the file was read
	// to its end, so its time is the time the end was read.
	out, err = runCLI(t, "", e.args("query", "plums", "--json", "--after", "2000-01-01T00:00:00Z", "--after-timeout", "0")...)
	require.NoError(t, err, out)
	require.Contains(t, out, `"doc_id":"public.notes/3"`)
	out, err = runCLI(t, "", e.args("query", "plums", "--after", "2999-01-01T00:00:00Z", "--after-timeout", "0")...)
	require.Equal(t, ExitNotYet, exitCode(err), out)

	// A Kafka position on an index fed by a file: no lane of its kind.
	_, err = runCLI(t, "", e.args("query", "plums", "--after", "topic/0/5", "--after-timeout", "0")...)
	require.Equal(t, ExitNotYet, exitCode(err))
	require.ErrorContains(t, err, "no watermark for topic/0")

	_, err = runCLI(t, "", e.args("query", "plums", "--after", "yesterday")...)
	require.ErrorContains(t, err, `--after: "yesterday" is neither a position`)
	require.ErrorContains(t, err, "RFC 3339")
	require.Equal(t, ExitFailure, exitCode(err))
	var ee *exitError
	require.False(t, errors.As(err, &ee))

	_, err = runCLI(t, "", e.args("query", "plums", "--after", "3", "--after-timeout", "-1s")...)
	require.ErrorContains(t, err, "--after-timeout")
}

// index status shows the watermark of each source of the index: a file
// source has one lane, so its line is the position, caught up at the end
// of the file; --json lists the lanes.
func TestIndexStatusShowsTheWatermark(t *testing.T) {
	e := newReindexEnv(t)
	out, err := runCLI(t, "", e.args("serve", "--once", "--set", "source.kind=file", "--set", "source.file.path=/dev/null")...)
	require.NoError(t, err, out)
	out, err = runCLI(t, "", e.args("index", "status")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "watermark: none yet")

	e.serveOut(nil, noteEvent("c", 1, 10, "First note, about apples."), noteEvent("c", 2, 11, "Second note, about pears."))
	out, err = runCLI(t, "", e.args("index", "status")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "WATERMARK")
	require.Regexp(t, `\nfile:\S+events\.jsonl\s+line\s+1\s+2\s+\d{4}-\d\d-\d\dT\S+\s+\S+s\s+yes\n`, out)
	require.Contains(t, out, "nothing left", "the leftovers are still shown")

	out, err = runCLI(t, "", e.args("index", "status", "--json")...)
	require.NoError(t, err, out)
	var st indexStatus
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Len(t, st.Watermarks, 1)
	w := st.Watermarks[0]
	require.Equal(t, "line", w.Kind)
	require.Equal(t, 1, w.Lanes)
	require.NotNil(t, w.Position)
	require.Equal(t, "2", *w.Position)
	require.NotNil(t, w.Through)
	require.NotNil(t, w.Age)
	require.GreaterOrEqual(t, *w.Age, 0.0)
	require.True(t, w.CaughtUp)
	require.Len(t, w.LaneMarks, 1)
	require.Equal(t, "2", w.LaneMarks[0].Position)
	require.NotEmpty(t, w.LaneMarks[0].Writer)
}

// A source of several lanes has no single position; its time is its
// oldest lane's, unknown when a lane's is, and it is caught up only when
// every lane is.
func TestSourceWatermarksGroupsLanes(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 10, 0, time.UTC)
	t1, t2 := now.Add(-4*time.Second), now.Add(-2*time.Second)
	marks := []sink.StoredMark{
		{Mark: cdc.OffsetMark("kafka:g", "t", 0, 41, t1, t1, true), Updated: now, Writer: "h/1"},
		{Mark: cdc.OffsetMark("kafka:g", "t", 1, 7, t2, t2, false), Updated: now, Writer: "h/1"},
		{Mark: cdc.LineMark("file:x", 3, time.Time{}, time.Time{}, true), Updated: now, Writer: "h/2"},
	}
	ws := sourceWatermarks(marks, now)
	require.Len(t, ws, 2)
	k := ws[0]
	require.Equal(t, 2, k.Lanes)
	require.Nil(t, k.Position)
	require.Equal(t, t1, *k.Through)
	require.Equal(t, t2, *k.Committed)
	require.InDelta(t, 4.0, *k.Age, 1e-9)
	require.False(t, k.CaughtUp)
	require.Equal(t, []string{"t/0/41", "t/1/7"}, []string{k.LaneMarks[0].Position, k.LaneMarks[1].Position})
	f := ws[1]
	require.Equal(t, "3", *f.Position)
	require.Nil(t, f.Through)
	require.Nil(t, f.Age)
	require.True(t, f.CaughtUp)

	var b strings.Builder
	require.NoError(t, printWatermarks(&b, ws))
	require.Regexp(t, `kafka:g\s+offset\s+2\s+\(--json lists the lanes\)\s+2026-12-07T10:00:06Z\s+4s\s+no\n`, b.String())
	require.Regexp(t, `file:x\s+line\s+1\s+3\s+unknown\s+unknown\s+yes\n`, b.String())
}
