package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// database is a Postgres database created for one measurement, so that
// pg_stat_database and pg_stat_activity count only its own work.
type database struct {
	name, url, admin string
}

func createDatabase(ctx context.Context, adminURL string) (*database, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	name := "bench_throughput_" + randomSuffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	db := &database{name: name, url: u.String(), admin: adminURL}
	c2, err := pgx.Connect(ctx, db.url)
	if err != nil {
		db.drop(ctx)
		return nil, err
	}
	defer c2.Close(ctx)
	if _, err := c2.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS vector"); err != nil {
		db.drop(ctx)
		return nil, err
	}
	return db, nil
}

func (db *database) drop(ctx context.Context) {
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db.name+" WITH (FORCE)")
}

// xacts reads the database's committed transactions so far. Backends
// report at most once a second and at exit, hence the caller's wait.
func (db *database) xacts(ctx context.Context) (int64, error) {
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", db.name).Scan(&n)
	return n, err
}

// pgUsage is what a sampler read of Postgres's CPU during a measurement.
type pgUsage struct {
	// backends is the CPU of the database's client backends.
	backends time.Duration
	// all adds every other Postgres process that worked for the run: the
	// database's autovacuum and parallel workers, and the cluster's
	// background processes (WAL writer, checkpointer, background writer,
	// autovacuum launcher), counted from their reading at the start. On a
	// shared server the background processes also work for others.
	all time.Duration
}

// backendCPU samples the CPU time of the Postgres processes that work for
// the database from /proc until stop is closed, keeping each one's last
// reading (CPU time is cumulative, and a backend's entry disappears at
// exit): it misses at most the last interval of each process that exits.
// Processes alive at the first sample (the cluster's background processes)
// count from that reading; the sampler's own backend does not count.
func (db *database) backendCPU(ctx context.Context, stop <-chan struct{}) func() pgUsage {
	type reading struct {
		first, last time.Duration
		client      bool
	}
	var mu sync.Mutex
	seen := map[int]*reading{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, db.admin)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for sample := 0; ; sample++ {
			// datname is NULL for the cluster's background processes;
			// other databases' backends and workers are not ours.
			rows, err := conn.Query(ctx, "SELECT pid, backend_type = 'client backend' FROM pg_stat_activity"+
				" WHERE (datname = $1 OR datname IS NULL) AND pid <> pg_backend_pid()", db.name)
			if err == nil {
				type proc struct {
					pid    int32
					client bool
				}
				procs, _ := pgx.CollectRows(rows, func(row pgx.CollectableRow) (proc, error) {
					var p proc
					return p, row.Scan(&p.pid, &p.client)
				})
				for _, p := range procs {
					d, ok := procCPU(int(p.pid))
					if !ok {
						continue
					}
					mu.Lock()
					r := seen[int(p.pid)]
					if r == nil {
						r = &reading{client: p.client}
						if sample == 0 {
							r.first = d
						}
						seen[int(p.pid)] = r
					}
					r.last = d
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() pgUsage {
		<-done
		mu.Lock()
		defer mu.Unlock()
		var c pgUsage
		for _, r := range seen {
			d := r.last - r.first
			c.all += d
			if r.client {
				c.backends += d
			}
		}
		return c
	}
}

// procCPU is utime+stime of pid from /proc/<pid>/stat, in clock ticks of
// 10 ms (USER_HZ is 100 on Linux).
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * 10 * time.Millisecond, true
}

// relay forwards TCP connections to Postgres and counts round trips: a
// client→server burst after the server last spoke (or at the start) is one
// round trip, however many messages it carries, so pipelined statements
// count once.
type relay struct {
	ln     net.Listener
	target string
	trips  atomic.Int64
	wg     sync.WaitGroup
}

func newRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		var serverSpoke atomic.Bool
		serverSpoke.Store(true)
		r.wg.Add(2)
		go func() { // client → server
			defer r.wg.Done()
			defer s.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if serverSpoke.Swap(false) {
						r.trips.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server → client
			defer r.wg.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					serverSpoke.Store(true)
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if err != io.EOF {
						return
					}
					return
				}
			}
		}()
	}
}

func (r *relay) close() {
	r.ln.Close()
	r.wg.Wait()
}
