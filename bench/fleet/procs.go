package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ragsync/ragsync/internal/orphan"
)

// world is what every run shares: Kafka, the source table, the binary.
type world struct {
	o       options
	brokers string
	topic   string
	src     string // source schema of the backfill's table
	dir     string
}

// runConfig is one run's settings: its fake provider, consumer group,
// index schema, and the budget's Redis prefix ("" without a budget).
type runConfig struct {
	baseURL      string
	group        string
	schema       string
	budgetPrefix string
	// unlimited leaves the limits out (the fresh load's single process).
	unlimited bool
}

// yaml is the configuration of one process of run c, serving http on
// listen ("" for none).
func (w *world) yaml(c runConfig, listen string) string {
	o := w.o
	limits := ""
	if !c.unlimited {
		limits = fmt.Sprintf("  requests_per_minute: %d\n", o.rpm)
		if o.tpm > 0 {
			limits += fmt.Sprintf("  tokens_per_minute: %d\n", o.tpm)
		}
	}
	if c.budgetPrefix != "" {
		limits += fmt.Sprintf("  budget:\n    redis_url: %s\n    prefix: %q\n", o.redisURL, c.budgetPrefix)
	}
	return fmt.Sprintf(`source:
  kind: kafka
  kafka:
    brokers: [%[1]s]
    topics: [%[2]s]
    group: %[3]s
tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
  - match: %[4]s.backlog
    id: [id]
    text: "# {{title}}\n\n{{body}}"
chunker:
  strategy: greedy
  target_tokens: 60
  min_tokens: 20
  max_tokens: 200
embedder:
  provider: openai
  base_url: %[5]s
  model: text-embedding-3-small
  dimensions: %[6]d
  api_key: bench
  max_batch_inputs: %[7]d
%[8]spostgres:
  url: %[9]s
  schema: %[10]s
backfill:
  source_url: %[9]s
index: fleet
http:
  listen: %[11]q
monitor:
  enabled: false
`, w.brokers, w.topic, c.group, w.src, c.baseURL, o.dims, o.batch, limits, o.pgURL, c.schema, listen)
}

// proc is one ragsync child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited closes
	logf   *os.File
	base   string // http://listen, "" without one
	done   time.Time
}

// start runs `ragsync args… --config <its own file>` with config yaml.
func (w *world) start(name, yaml, listen string, args ...string) (*proc, error) {
	cfg := filepath.Join(w.dir, name+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	lf, err := os.Create(filepath.Join(w.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := orphan.DieWithParent(exec.Command(w.o.bin, append(args, "--config", cfg)...))
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s %s: %w (build it with make build, or pass -bin)", w.o.bin, args[0], err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), logf: lf}
	if listen != "" {
		p.base = "http://" + listen
	}
	go func() {
		p.err = cmd.Wait()
		p.done = time.Now()
		close(p.exited)
	}()
	return p, nil
}

// log is the tail of the process's output.
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logf.Name())
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop asks the process to stop and waits for it (then kills it).
func (p *proc) stop() {
	if p.running() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.logf.Close()
}

// wait waits for the process to exit by itself within limit.
func (p *proc) wait(ctx context.Context, limit time.Duration) error {
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("%s: %w\n%s", p.name, p.err, p.log())
		}
		return nil
	case <-time.After(limit):
		return fmt.Errorf("%s still running after %s\n%s", p.name, limit, p.log())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitReady waits for the process's /readyz to answer 200.
func (p *proc) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if !p.running() {
			return fmt.Errorf("%s exited before it was ready: %v\n%s", p.name, p.err, p.log())
		}
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within %s\n%s", p.name, limit, p.log())
}

// freeAddr is a free 127.0.0.1 port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// fleet starts the replicas of run c: the first alone (it creates the
// index schema), then the rest. stop stops them all.
func (w *world) fleet(ctx context.Context, c runConfig, tag string) (reps []*proc, stop func(), err error) {
	stop = func() {
		for _, p := range reps {
			p.stop()
		}
	}
	for i := range w.o.replicas {
		addr, err := freeAddr()
		if err != nil {
			return reps, stop, err
		}
		p, err := w.start(fmt.Sprintf("%s-serve-%d", tag, i), w.yaml(c, addr), addr, "serve")
		if err != nil {
			return reps, stop, err
		}
		reps = append(reps, p)
		if i == 0 {
			if err := p.waitReady(ctx, 2*time.Minute); err != nil {
				return reps, stop, err
			}
		}
	}
	for _, p := range reps[1:] {
		if err := p.waitReady(ctx, 2*time.Minute); err != nil {
			return reps, stop, err
		}
	}
	return reps, stop, nil
}

// backfill starts the backfill of the source table for run c.
func (w *world) backfill(c runConfig, tag string) (*proc, error) {
	return w.start(tag+"-backfill", w.yaml(c, ""), "", "backfill", "--table", w.src+".backlog", "--progress", "none")
}
