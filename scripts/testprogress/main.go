// Command testprogress turns `go test -json` on its standard input into what
// a person watching `make test` needs: a line when each package's tests start
// running, go test's own closing line for each package as it finishes (the
// `ok` and `FAIL` lines CI reads), the full output of every failed test, and
// a line naming what is still running after each minute of silence. It exits
// 1 when a package or its build failed, 0 otherwise.
//
// Usage: go test -json ./... | testprogress [PACKAGES [START_UNIX_TIME]]
//
// It is a few dozen lines instead of gotestsum so that `make test` needs
// nothing beyond the Go toolchain and prints go test's standard lines
// unchanged.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	// Arguments: how many packages run, and the Unix time the run began
	// (so its clock matches the lines scripts/test.sh printed before).
	total, since := 0, int64(0)
	if len(os.Args) > 1 {
		_, _ = fmt.Sscan(os.Args[1], &total)
	}
	if len(os.Args) > 2 {
		_, _ = fmt.Sscan(os.Args[2], &since)
	}
	r := newReport(os.Stdout, total, time.Now)
	if since > 0 {
		r.start = time.Unix(since, 0)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the heartbeat: its owner waits for it below
		defer wg.Done()
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				r.heartbeat(time.Minute)
			}
		}
	}()
	err := r.read(os.Stdin)
	close(stop)
	wg.Wait()
	r.summary()
	if err != nil {
		fmt.Fprintf(os.Stdout, "testprogress: read go test's output: %v\n", err)
		os.Exit(1)
	}
	if r.failed > 0 {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), plus the build
// events go test adds for packages whose build fails.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	Elapsed    float64
	ImportPath string
}

type pkgState struct {
	started time.Time
	out     []string            // package-level output (panics, timeouts, the closing line)
	tests   map[string][]string // output per test, kept until it passes
}

// report tracks the run; its methods are safe for the reader and the
// heartbeat to call at once.
type report struct {
	mu       sync.Mutex
	w        io.Writer
	now      func() time.Time
	start    time.Time
	lastLine time.Time
	total    int
	running  map[string]*pkgState
	// finished holds the packages whose closing line is printed: events
	// for them that arrive later (a second package "pass", which go test
	// emits when a test binary runs a copy of itself that inherits its
	// test2json framing) must not start them over, or their `ok` line
	// would print twice.
	finished map[string]bool
	done     int
	failed   int
	failures []string
}

func newReport(w io.Writer, total int, now func() time.Time) *report {
	t := now()
	return &report{w: w, now: now, start: t, lastLine: t, total: total, running: map[string]*pkgState{}, finished: map[string]bool{}}
}

func (r *report) printf(format string, args ...any) {
	fmt.Fprintf(r.w, format, args...)
	r.lastLine = r.now()
}

func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			r.mu.Lock()
			r.printf("%s\n", line) // not JSON: go test's own message, passed on
			r.mu.Unlock()
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) elapsed() string {
	return r.now().Sub(r.start).Truncate(time.Second).String()
}

func (r *report) handle(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Action {
	case "build-output":
		r.printf("%s", e.Output)
		return
	case "build-fail":
		r.failed++
		r.failures = append(r.failures, e.ImportPath+" (build)")
		return
	}
	if e.Package == "" {
		return
	}
	if r.finished[e.Package] {
		if e.Test == "" && e.Action == "fail" && !slices.Contains(r.failures, e.Package) {
			// A package reported passed and then failed: the failure is
			// what counts, once.
			r.failed++
			r.failures = append(r.failures, e.Package)
			r.printf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		return
	}
	p := r.running[e.Package]
	if p == nil {
		p = &pkgState{started: r.now(), tests: map[string][]string{}}
		r.running[e.Package] = p
		if e.Action != "skip" || e.Test != "" {
			r.printf("=== %s running %s%s\n", r.elapsed(), e.Package, r.of(r.done+len(r.running)))
		}
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out = append(p.out, e.Output)
		case "pass", "skip", "fail":
			r.finish(e, p)
		}
		return
	}
	switch e.Action {
	case "output":
		p.tests[e.Test] = append(p.tests[e.Test], e.Output)
	case "pass", "skip":
		if !strings.Contains(e.Test, "/") && e.Elapsed >= 30 {
			r.printf("    %s %s passed (%.0fs)\n", e.Package, e.Test, e.Elapsed)
		}
		delete(p.tests, e.Test)
	case "fail":
		// A failed test's output in full, as soon as it fails: its
		// subtests' output is printed with their own failure.
		r.printf("%s", strings.Join(p.tests[e.Test], ""))
		delete(p.tests, e.Test)
	}
}

// finish prints the package's closing line (go test's own `ok`/`FAIL`
// line) and, on failure, whatever else the package printed.
func (r *report) finish(e event, p *pkgState) {
	delete(r.running, e.Package)
	r.finished[e.Package] = true
	r.done++
	closing := ""
	var rest []string
	for _, l := range p.out {
		if strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   \t") {
			closing += l
		} else {
			rest = append(rest, l)
		}
	}
	if e.Action == "fail" {
		r.failed++
		r.failures = append(r.failures, e.Package)
		for _, out := range p.tests { // tests that never reported an end: a panic or timeout
			r.printf("%s", strings.Join(out, ""))
		}
		r.printf("%s", strings.Join(rest, ""))
		if closing == "" {
			closing = fmt.Sprintf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
	}
	if closing == "" {
		closing = fmt.Sprintf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
	}
	r.printf("%s", closing)
}

func (r *report) of(n int) string {
	if r.total <= 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of %d)", n, r.total)
}

// heartbeat names what is running when nothing was printed for quiet.
func (r *report) heartbeat(quiet time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.now().Sub(r.lastLine) < quiet {
		return
	}
	if len(r.running) == 0 {
		r.printf("... %s compiling test binaries with -race (%d packages done)\n", r.elapsed(), r.done)
		return
	}
	names := make([]string, 0, len(r.running))
	for name, p := range r.running {
		names = append(names, fmt.Sprintf("%s (%s)", name, r.now().Sub(p.started).Truncate(time.Second)))
	}
	sort.Strings(names)
	r.printf("... %s still running: %s; %d packages done\n", r.elapsed(), strings.Join(names, ", "), r.done)
}

func (r *report) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, p := range r.running { // go test stopped before they ended
		r.failed++
		r.failures = append(r.failures, name+" (unfinished)")
		for _, out := range p.tests {
			r.printf("%s", strings.Join(out, ""))
		}
		r.printf("%s", strings.Join(p.out, ""))
	}
	if r.failed > 0 {
		r.printf("=== %s: %d packages finished, FAILED: %s\n", r.elapsed(), r.done, strings.Join(r.failures, ", "))
		return
	}
	r.printf("=== %s: %d packages finished, all passed\n", r.elapsed(), r.done)
}
