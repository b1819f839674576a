package embedder_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
)

// ownRedis is a redis-server of the test's own, on a free port, that the
// test may kill and start again (never the machine's Redis).
type ownRedis struct {
	port int
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a redis-server; skipped under -short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &ownRedis{port: l.Addr().(*net.TCPAddr).Port}
	require.NoError(t, l.Close())
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

func (r *ownRedis) url() string { return "redis://127.0.0.1:" + strconv.Itoa(r.port) + "/0" }

func (r *ownRedis) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(t, r.cmd.Start())
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(r.port)})
	defer rdb.Close()
	require.Eventually(t, func() bool { return rdb.Ping(context.Background()).Err() == nil }, 5*time.Second, 20*time.Millisecond)
}

func (r *ownRedis) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// TestBudgetSurvivesRedisRestart: Redis killed mid-run, the processes keep
// embedding at their share of the limit (never unlimited: the fleet stays
// within the key's rate), and share it through Redis again once it is
// back (redis_rate's scripts are loaded again into the new server).
func TestBudgetSurvivesRedisRestart(t *testing.T) {
	const rpm = 600
	r := startOwnRedis(t)
	f := newFleet(t)
	spec := func(name string) helperSpec {
		return helperSpec{Name: name, RedisURL: r.url(), Prefix: "ragsync:budget:test", Key: "k", RPM: rpm, Senders: 4, Run: 10 * time.Second}
	}
	done := make(chan map[string]helperReport)
	go func() { done <- f.run(t, spec("p1"), spec("p2"), spec("p3"), spec("p4")) }()
	time.Sleep(3 * time.Second) // shared, every member seen
	r.stop()
	down := time.Now()
	time.Sleep(4 * time.Second)
	up := time.Now()
	r.start(t)
	reports := <-done

	// While Redis was down: each process at a quarter of the limit.
	var during []time.Time
	for _, a := range f.arrivals("") {
		if a.After(down.Add(500*time.Millisecond)) && a.Before(up) {
			during = append(during, a)
		}
	}
	w := up.Sub(down.Add(500 * time.Millisecond))
	require.NotEmpty(t, during, "the processes kept embedding while Redis was down")
	rate := float64(len(during)) / (rpm * w.Seconds() / 60)
	t.Logf("Redis down: %d requests in %s, %.2f× the key's rate", len(during), w, rate)
	require.LessOrEqual(t, rate, 1.2, "the fleet without Redis sent %.2f× the key's rate", rate)
	require.GreaterOrEqual(t, rate, 0.6, "the fleet without Redis sent only %.2f× the key's rate", rate)
	for _, rep := range reports {
		require.Contains(t, rep.Modes, embedder.BudgetDegraded, rep.Name)
		require.Equal(t, embedder.BudgetShared, rep.Status.Mode, "%s: the shared budget came back", rep.Name)
		require.Zero(t, rep.Errors, rep.Name)
	}
	// And shared again after the restart: within the key's limit.
	var after []time.Time
	for _, a := range f.arrivals("") {
		if a.After(up.Add(1500 * time.Millisecond)) {
			after = append(after, a)
		}
	}
	require.LessOrEqual(t, float64(maxInWindow(after, time.Second)), rpm/60+float64(embedder.RequestBurst(rpm))+arrivalSlack)
}
