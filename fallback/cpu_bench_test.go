package fallback

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuMeter reads the CPU time Redis and this process spent over a run, so a
// benchmark can report what one request costs each of them. On a machine
// where the load generator, the front door and Redis share two cores, a
// request's CPU cost is what decides the throughput and the tail; it is also
// steadier from run to run than either.
type cpuMeter struct {
	rdb          *redis.Client
	redis0, go0  time.Duration
	redisOK, gOK bool
}

func startCPU(rdb *redis.Client) *cpuMeter {
	m := &cpuMeter{rdb: rdb}
	m.redis0, m.redisOK = redisCPU(rdb)
	m.go0, m.gOK = processCPU()
	return m
}

// report adds redis_us/req and go_us/req for n requests.
func (m *cpuMeter) report(b *testing.B, n int) {
	if n == 0 {
		return
	}
	if r1, ok := redisCPU(m.rdb); ok && m.redisOK {
		b.ReportMetric(float64((r1-m.redis0).Microseconds())/float64(n), "redis_us/req")
	}
	if g1, ok := processCPU(); ok && m.gOK {
		b.ReportMetric(float64((g1-m.go0).Microseconds())/float64(n), "go_us/req")
	}
}

// redisCPU is used_cpu_user + used_cpu_sys of the server (all its threads).
func redisCPU(rdb *redis.Client) (time.Duration, bool) {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, false
	}
	var total float64
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return 0, false
		}
		total += f
		found++
	}
	return time.Duration(total * float64(time.Second)), found == 2
}

func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
