package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReport(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	in := strings.Join([]string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestOK"}`,
		`{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestOK","Output":"quiet detail\n"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}`,
		`{"Action":"run","Package":"m/a","Test":"TestSlow"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestSlow","Elapsed":42}`,
		`{"Action":"output","Package":"m/a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t42.5s\n"}`,
		`{"Action":"pass","Package":"m/a","Elapsed":42.5}`,
		`{"Action":"start","Package":"m/b"}`,
		`{"Action":"run","Package":"m/b","Test":"TestBad"}`,
		`{"Action":"output","Package":"m/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}`,
		`{"Action":"output","Package":"m/b","Test":"TestBad","Output":"    b_test.go:9: want 1, got 2\n"}`,
		`{"Action":"output","Package":"m/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}`,
		`{"Action":"fail","Package":"m/b","Test":"TestBad","Elapsed":0}`,
		`{"Action":"output","Package":"m/b","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"m/b","Output":"FAIL\tm/b\t0.2s\n"}`,
		`{"Action":"fail","Package":"m/b","Elapsed":0.2}`,
		`{"ImportPath":"m/c [m/c.test]","Action":"build-output","Output":"c.go:3:1: syntax error\n"}`,
		`{"ImportPath":"m/c [m/c.test]","Action":"build-fail"}`,
		`# a line go test printed as text`,
		`{"Action":"start","Package":"m/d"}`,
		`{"Action":"run","Package":"m/d","Test":"TestHang"}`,
		`{"Action":"output","Package":"m/d","Test":"TestHang","Output":"=== RUN   TestHang\n"}`,
	}, "\n")
	var out bytes.Buffer
	r := newReport(&out, 4, now)
	require.NoError(t, r.read(strings.NewReader(in)))
	clock = clock.Add(90 * time.Second)
	r.heartbeat(time.Minute)
	r.summary()
	want := `=== 0s running m/a (1 of 4)
    m/a TestSlow passed (42s)
ok  	m/a	42.5s
=== 0s running m/b (2 of 4)
=== RUN   TestBad
    b_test.go:9: want 1, got 2
--- FAIL: TestBad (0.00s)
FAIL
FAIL	m/b	0.2s
c.go:3:1: syntax error
# a line go test printed as text
=== 0s running m/d (3 of 4)
... 1m30s still running: m/d (1m30s); 2 packages done
=== RUN   TestHang
=== 1m30s: 2 packages finished, FAILED: m/b, m/c [m/c.test] (build), m/d (unfinished)
`
	require.Equal(t, want, out.String())
	require.Equal(t, 3, r.failed)
}

func TestHeartbeatStaysQuietWhileLinesFlow(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	r := newReport(&out, 0, func() time.Time { return clock })
	clock = clock.Add(30 * time.Second)
	r.heartbeat(time.Minute)
	require.Empty(t, out.String())
	clock = clock.Add(31 * time.Second)
	r.heartbeat(time.Minute)
	require.Equal(t, "... 1m1s compiling test binaries with -race (0 packages done)\n", out.String())
}

// TestLateEventsDoNotRestartAPackage: go test can report a package's end
// twice (a test binary that runs a copy of itself with inherited output
// makes test2json see a second "PASS"); the package's ok line still
// prints once, and the package is not counted again nor left "running".
func TestLateEventsDoNotRestartAPackage(t *testing.T) {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := strings.Join([]string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestSelf"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestSelf","Elapsed":0.1}`,
		`{"Action":"output","Package":"m/a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.5s\n"}`,
		`{"Action":"pass","Package":"m/a","Elapsed":0.5}`,
		`{"Action":"output","Package":"m/a","Output":"ok  \tm/a\t0.5s\n"}`,
		`{"Action":"pass","Package":"m/a","Elapsed":0.5}`,
	}, "\n")
	var out bytes.Buffer
	r := newReport(&out, 1, func() time.Time { return clock })
	require.NoError(t, r.read(strings.NewReader(in)))
	r.summary()
	require.Equal(t, "=== 0s running m/a (1 of 1)\nok  \tm/a\t0.5s\n=== 0s: 1 packages finished, all passed\n", out.String())
	require.Zero(t, r.failed)

	// A failure reported after the pass still fails the run, once.
	out.Reset()
	r = newReport(&out, 1, func() time.Time { return clock })
	require.NoError(t, r.read(strings.NewReader(in+"\n"+`{"Action":"fail","Package":"m/a","Elapsed":0.6}`+"\n"+`{"Action":"fail","Package":"m/a","Elapsed":0.6}`)))
	r.summary()
	require.Equal(t, 1, r.failed)
	require.Contains(t, out.String(), "FAIL\tm/a\t0.600s\n")
	require.Contains(t, out.String(), "FAILED: m/a\n")
}
