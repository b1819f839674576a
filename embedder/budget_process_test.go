package embedder_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
	"github.com/ragsync/ragsync/internal/redistest"
)

// helperEnv marks the re-executed test binary as a budget helper process;
// its value is the JSON of a helperSpec.
const helperEnv = "RAGSYNC_BUDGET_HELPER"

// helperSpec is what a helper process does: embed one text per request
// against URL for Run, from Senders goroutines (or one request every
// Every), on the budget RedisURL/Key (none: per-process limits).
type helperSpec struct {
	Name      string
	URL       string
	RedisURL  string
	Prefix    string
	Key       string
	RPM       int
	Lane      embedder.Lane
	Senders   int
	Every     time.Duration // > 0: one request at this pace instead of Senders flat out
	Run       time.Duration
	Delay     time.Duration // before the first request
	ClockSkew time.Duration // the budget's clock is off by this much
}

// helperReport is what a helper prints when done, and Modes what it saw
// of the budget's mode while running (sampled every 100ms).
type helperReport struct {
	Name   string
	Status embedder.BudgetStatus
	Modes  []string
	Errors int
}

// TestBudgetHelperProcess is not a test: it is the body of the helper
// processes the budget tests start (the test binary re-executed with
// helperEnv set), each one ragsync process sharing the provider key.
func TestBudgetHelperProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		t.Skip("runs only as a helper process of the budget tests")
	}
	var spec helperSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "bad helper spec:", err)
		os.Exit(2)
	}
	cfg := embedder.Config{Provider: "openai", BaseURL: spec.URL, Model: "text-embedding-3-small", Dimensions: 16,
		APIKey: "sk-test", Timeout: 5 * time.Second, MaxRetries: 20, RequestsPerMinute: spec.RPM, Lane: spec.Lane,
		Budget: embedder.BudgetConfig{RedisURL: spec.RedisURL, Prefix: spec.Prefix, Key: spec.Key}}
	c, err := embedder.NewOpenAI(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(2)
	}
	if spec.ClockSkew != 0 {
		embedder.SetBudgetClock(c, func() time.Time { return time.Now().Add(spec.ClockSkew) })
	}
	time.Sleep(spec.Delay)
	ctx, cancel := context.WithTimeout(context.Background(), spec.Run)
	defer cancel()
	var (
		mu    sync.Mutex
		rep   = helperReport{Name: spec.Name}
		seq   int
		g     errgroup.Group
		embed = func() {
			mu.Lock()
			seq++
			text := fmt.Sprintf("%s %s request %d", spec.Name, spec.Lane, seq)
			mu.Unlock()
			if _, err := c.Embed(ctx, []string{text}); err != nil && ctx.Err() == nil {
				mu.Lock()
				rep.Errors++
				mu.Unlock()
			}
		}
	)
	g.Go(func() error {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			mu.Lock()
			rep.Modes = append(rep.Modes, c.Budget().Mode)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
	if spec.Every > 0 {
		g.Go(func() error {
			tick := time.NewTicker(spec.Every)
			defer tick.Stop()
			for ctx.Err() == nil {
				embed()
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
			return nil
		})
	}
	for range spec.Senders {
		g.Go(func() error {
			for ctx.Err() == nil {
				embed()
			}
			return nil
		})
	}
	_ = g.Wait()
	rep.Status = c.Budget()
	out, _ := json.Marshal(rep)
	fmt.Println("REPORT " + string(out))
	os.Exit(0) // the helper's goroutines (Redis pool) are not the parent's leaks
}

// fleet is a fake provider and the helper processes sending to it.
type fleet struct {
	srv *openaitest.Server
	mu  sync.Mutex
	// arrivals of every request the server received, with its text.
	at    []time.Time
	texts []string
	// fault, when set, decides a request's answer (nil: served).
	fault func(text string, at time.Time) *openaitest.Fault
}

func newFleet(t *testing.T) *fleet { return newFleetWith(t, openaitest.Options{}) }

func newFleetWith(t *testing.T, opts openaitest.Options) *fleet {
	f := &fleet{srv: openaitest.New(t, opts)}
	f.srv.SetHook(func(r openaitest.Request) *openaitest.Fault {
		now := time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.at = append(f.at, now)
		f.texts = append(f.texts, r.Input[0])
		if f.fault != nil {
			return f.fault(r.Input[0], now)
		}
		return nil
	})
	return f
}

// arrivals returns the arrival times of the requests whose text has
// prefix (every request for "").
func (f *fleet) arrivals(prefix string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for i, tx := range f.texts {
		if strings.HasPrefix(tx, prefix) {
			out = append(out, f.at[i])
		}
	}
	return out
}

// run starts one helper process per spec at once and returns their
// reports when all have exited.
func (f *fleet) run(t *testing.T, specs ...helperSpec) map[string]helperReport {
	t.Helper()
	var g errgroup.Group
	var mu sync.Mutex
	reports := map[string]helperReport{}
	for _, s := range specs {
		s.URL = f.srv.URL
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBudgetHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start())
		g.Go(func() error {
			if err := cmd.Wait(); err != nil {
				return fmt.Errorf("helper %s: %v\n%s\n%s", s.Name, err, stdout.String(), stderr.String())
			}
			sc := bufio.NewScanner(&stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				if line, ok := strings.CutPrefix(sc.Text(), "REPORT "); ok {
					var r helperReport
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						return err
					}
					mu.Lock()
					reports[s.Name] = r
					mu.Unlock()
					return nil
				}
			}
			return fmt.Errorf("helper %s printed no report:\n%s\n%s", s.Name, stdout.String(), stderr.String())
		})
	}
	require.NoError(t, g.Wait())
	return reports
}

// budgetKeys returns a Redis URL and a fresh prefix for one test's budget
// (deleted when it ends).
func budgetKeys(t *testing.T) (string, string) {
	_, prefix := redistest.Client(t)
	return redistest.URL(), prefix
}

// arrivalSlack is what the fleet's bound allows on top of rate × window +
// burst, in requests: the server stamps arrivals, not the budget's grants,
// and on a loaded machine a request admitted earlier can arrive late and
// compress the window the others are judged over (about 0.2 s of a 10 a
// second rate). The controls overrun the bound by several times that.
const arrivalSlack = 3

// maxInWindow is the most arrivals within any window of length w.
func maxInWindow(at []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range at {
		for at[i].Sub(at[j]) > w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func span(at []time.Time) time.Duration {
	if len(at) < 2 {
		return 0
	}
	return at[len(at)-1].Sub(at[0])
}

// TestBudgetHoldsTheFleetToTheKeysLimit: four processes on one budget of R
// requests a minute send, together, at most R×T/60 + burst over any
// window T, and use at least 90% of it; the same four without the budget
// overrun it about fourfold (the check can fail).
func TestBudgetHoldsTheFleetToTheKeysLimit(t *testing.T) {
	const rpm = 600 // 10 a second, burst 10
	const run = 6 * time.Second
	redisURL, prefix := budgetKeys(t)
	spec := func(name, redis string) helperSpec {
		return helperSpec{Name: name, RedisURL: redis, Prefix: prefix, Key: "k", RPM: rpm, Senders: 4, Run: run}
	}
	f := newFleet(t)
	reports := f.run(t, spec("p1", redisURL), spec("p2", redisURL), spec("p3", redisURL), spec("p4", redisURL))
	at := f.arrivals("")
	burst := embedder.RequestBurst(rpm)
	for _, w := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second} {
		bound := rpm*w.Seconds()/60 + float64(burst) + arrivalSlack
		require.LessOrEqual(t, float64(maxInWindow(at, w)), bound, "requests within %s", w)
	}
	used := float64(len(at)) / (rpm * span(at).Seconds() / 60)
	t.Logf("shared: %d requests in %s (%.2f of the key's rate), at most %d in a second", len(at), span(at), used, maxInWindow(at, time.Second))
	require.GreaterOrEqual(t, used, 0.9, "the fleet used %.2f of the key's rate", used)
	for _, r := range reports {
		require.Equal(t, embedder.BudgetShared, r.Status.Mode, r.Name)
		require.Equal(t, 4, r.Status.Members, r.Name)
		require.Positive(t, r.Status.Lanes[embedder.LaneLive].Requests, r.Name)
		require.Zero(t, r.Errors, r.Name)
	}

	// Control: the same fleet with per-process limits overruns the key.
	c := newFleet(t)
	c.run(t, spec("c1", ""), spec("c2", ""), spec("c3", ""), spec("c4", ""))
	at = c.arrivals("")
	rate := float64(len(at)) / (rpm * span(at).Seconds() / 60)
	t.Logf("control: %.2f× the key's rate", rate)
	require.Greater(t, rate, 2.5, "without the shared budget four processes send about 4× the key's rate, got %.2f×", rate)
}

// TestBudgetLanes: a live process and a backfill process on one budget:
// live gets its whole demand (R/2) without waiting for the backfill,
// which takes the rest; once live stops, the backfill takes everything.
func TestBudgetLanes(t *testing.T) {
	const rpm = 600
	redisURL, prefix := budgetKeys(t)
	f := newFleet(t)
	reports := f.run(t,
		helperSpec{Name: "live", RedisURL: redisURL, Prefix: prefix, Key: "k", RPM: rpm, Lane: embedder.LaneLive,
			Every: 200 * time.Millisecond, Run: 5 * time.Second, Delay: time.Second},
		helperSpec{Name: "back", RedisURL: redisURL, Prefix: prefix, Key: "k", RPM: rpm, Lane: embedder.LaneBackfill,
			Senders: 8, Run: 10 * time.Second})
	live, back := f.arrivals("live "), f.arrivals("back ")
	require.NotEmpty(t, live)
	start, stop := live[0], live[len(live)-1]
	inLive := func(at []time.Time, from, to time.Time) int {
		n := 0
		for _, a := range at {
			if !a.Before(from) && !a.After(to) {
				n++
			}
		}
		return n
	}
	// Live asked for 5 a second for 5 seconds (about 25) and got them.
	require.GreaterOrEqual(t, len(live), 23, "live's demand")
	lr := reports["live"].Status.Lanes[embedder.LaneLive]
	t.Logf("live: %d requests, mean wait %s; backfill: %d requests", len(live), lr.Wait/time.Duration(max(lr.Requests, 1)), len(back))
	require.Less(t, lr.Wait/time.Duration(lr.Requests), 30*time.Millisecond, "live requests waited for the backfill")
	// The backfill took the rest while live ran.
	while := stop.Sub(start).Seconds()
	require.GreaterOrEqual(t, float64(inLive(back, start, stop)), 0.8*(rpm/60*while-float64(len(live))), "the backfill's share while live ran")
	// And everything after live stopped.
	after := back[len(back)-1].Sub(stop.Add(500 * time.Millisecond)).Seconds()
	require.Greater(t, after, 2.0)
	got := float64(inLive(back, stop.Add(500*time.Millisecond), back[len(back)-1]))
	require.GreaterOrEqual(t, got, 0.85*rpm/60*after, "the backfill alone")
	require.LessOrEqual(t, float64(maxInWindow(f.arrivals(""), 2*time.Second)), rpm/60*2.0+float64(embedder.RequestBurst(rpm))+arrivalSlack)
}

// TestBudgetPauseHoldsTheFleet: a 429 with Retry-After seen by one process
// holds back the others: their next request waits out the pause.
func TestBudgetPauseHoldsTheFleet(t *testing.T) {
	redisURL, prefix := budgetKeys(t)
	f := newFleet(t)
	var first time.Time // under f.mu, like everything the hook touches
	// Set under the lock: the race detector cannot see that the helper
	// processes' requests, which the hook serves, start after this.
	f.mu.Lock()
	f.fault = func(text string, at time.Time) *openaitest.Fault {
		if strings.HasPrefix(text, "a ") && first.IsZero() {
			first = at
			return &openaitest.Fault{Status: 429, RetryAfter: "3"}
		}
		return nil
	}
	f.mu.Unlock()
	// b starts a second after a's throttled request, within its pause.
	f.run(t,
		helperSpec{Name: "a", RedisURL: redisURL, Prefix: prefix, Key: "k", RPM: 6000, Senders: 1, Run: 5 * time.Second},
		helperSpec{Name: "b", RedisURL: redisURL, Prefix: prefix, Key: "k", RPM: 6000, Senders: 1, Run: 5 * time.Second, Delay: time.Second})
	b := f.arrivals("b ")
	require.NotEmpty(t, b)
	f.mu.Lock()
	at429 := first
	f.mu.Unlock()
	require.False(t, at429.IsZero())
	t.Logf("b's first request %s after a's 429", b[0].Sub(at429))
	require.GreaterOrEqual(t, b[0].Sub(at429), 2900*time.Millisecond, "b's first request went during the pause a's 429 set")
	a := f.arrivals("a ")
	require.GreaterOrEqual(t, len(a), 2)
	require.GreaterOrEqual(t, a[1].Sub(at429), 2900*time.Millisecond, "a's retry waited the Retry-After")
}

// TestBudgetSkewedClocks: processes whose clocks are 30 s apart still hold
// the fleet to the key's limit: the budget's time is Redis's.
func TestBudgetSkewedClocks(t *testing.T) {
	const rpm = 600
	redisURL, prefix := budgetKeys(t)
	f := newFleet(t)
	spec := func(name string, skew time.Duration) helperSpec {
		return helperSpec{Name: name, RedisURL: redisURL, Prefix: prefix, Key: "k", RPM: rpm, Senders: 4, Run: 5 * time.Second, ClockSkew: skew}
	}
	f.run(t, spec("behind", -30*time.Second), spec("right", 0), spec("ahead", 30*time.Second))
	at := f.arrivals("")
	for _, w := range []time.Duration{time.Second, 3 * time.Second} {
		require.LessOrEqual(t, float64(maxInWindow(at, w)), rpm*w.Seconds()/60+float64(embedder.RequestBurst(rpm))+arrivalSlack, "requests within %s", w)
	}
	used := float64(len(at)) / (rpm * span(at).Seconds() / 60)
	require.GreaterOrEqual(t, used, 0.9)
}

// TestBudgetAgainstAProvidersLimits: four processes on one budget of the
// key's R against a provider that enforces R (over one second's burst)
// get nearly all of R accepted and almost no 429s; without the budget
// most of their requests are refused.
func TestBudgetAgainstAProvidersLimits(t *testing.T) {
	const rpm = 600
	redisURL, prefix := budgetKeys(t)
	limits := openaitest.Options{Limits: openaitest.Limits{RequestsPerMinute: rpm, Quantum: time.Second}}
	spec := func(name, redis string) helperSpec {
		return helperSpec{Name: name, RedisURL: redis, Prefix: prefix, Key: "k", RPM: rpm, Senders: 4, Run: 6 * time.Second}
	}
	f := newFleetWith(t, limits)
	f.run(t, spec("p1", redisURL), spec("p2", redisURL), spec("p3", redisURL), spec("p4", redisURL))
	var accepted []time.Time
	for _, a := range f.srv.Admissions() {
		if !a.Throttled {
			accepted = append(accepted, a.At)
		}
	}
	used := float64(len(accepted)) / (rpm * span(accepted).Seconds() / 60)
	t.Logf("shared: %d accepted (%.2f of R), %d throttled", len(accepted), used, f.srv.Throttled())
	require.GreaterOrEqual(t, used, 0.85)
	require.LessOrEqual(t, f.srv.Throttled(), int64(len(accepted)/20), "429s")

	c := newFleetWith(t, limits)
	c.run(t, spec("c1", ""), spec("c2", ""), spec("c3", ""), spec("c4", ""))
	t.Logf("control: %d admissions, %d throttled", len(c.srv.Admissions()), c.srv.Throttled())
	require.Greater(t, c.srv.Throttled(), int64(len(c.srv.Admissions())/4), "without the budget the fleet meets 429s")
}
