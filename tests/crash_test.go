package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/internal/pgtest"
)

const faultTopic = "dbserver1.public.articles"

// kafkaWorld is a kfake cluster in the test process that serve processes
// reach over loopback.
type kafkaWorld struct {
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
}

func newKafkaWorld(t *testing.T, partitions int32) *kafkaWorld {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, faultTopic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(16 << 20)}))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(faultTopic),
		kgo.ProducerBatchMaxBytes(16<<20))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return &kafkaWorld{brokers: c.ListenAddrs(), cl: cl, adm: kadm.NewClient(cl)}
}

// source is the config's source section for group.
func (w *kafkaWorld) source(group string) string {
	return fmt.Sprintf("source:\n  kind: kafka\n  kafka:\n    brokers: [%s]\n    topics: [%s]\n    group: %s\n    max_poll_records: 200\n",
		strings.Join(w.brokers, ","), faultTopic, group)
}

// produce writes records keyed by document, so a document's changes share a
// partition and keep their order.
func (w *kafkaWorld) produce(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for len(recs) > 0 {
		n := min(len(recs), 500)
		require.NoError(t, w.cl.ProduceSync(ctx, recs[:n]...).FirstErr())
		recs = recs[n:]
	}
}

func kafkaRecords(as []article) []*kgo.Record {
	out := make([]*kgo.Record, len(as))
	for i, a := range as {
		out[i] = &kgo.Record{Key: []byte(a.key()), Value: []byte(a.value())}
	}
	return out
}

// lagOf returns the records the group has not committed yet, over the topic.
func (w *kafkaWorld) lagOf(t *testing.T, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := w.adm.ListEndOffsets(ctx, faultTopic)
	require.NoError(t, err)
	committed, err := w.adm.FetchOffsets(ctx, group)
	if err != nil && !strings.Contains(err.Error(), kerr.GroupIDNotFound.Message) {
		require.NoError(t, err)
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At > 0 {
			at = c.At
		}
		lag += o.Offset - at
	})
	return lag
}

// waitCaughtUp polls the group's committed offsets until they reach the end
// of the topic: serve without --once never exits by itself.
func (w *kafkaWorld) waitCaughtUp(t *testing.T, group string, limit time.Duration, alive ...*proc) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for w.lagOf(t, group) > 0 {
		require.True(t, time.Now().Before(deadline), "group %s still %d records behind after %s", group, w.lagOf(t, group), limit)
		for _, p := range alive {
			require.False(t, p.exited(), "serve exited early")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dlqCount is how many dead letters the topic's dead-letter topic holds.
func (w *kafkaWorld) dlqCount(t *testing.T) int64 {
	t.Helper()
	ends, err := w.adm.ListEndOffsets(context.Background(), faultTopic+".ragsync-dlq")
	if err != nil {
		return 0
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// proc is a running serve process; done closes when it exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startServe starts `ragsync serve` (no --once) for e; its stderr goes to a
// file that is logged at cleanup.
func (e *env) startServe(name string) *proc {
	e.t.Helper()
	logPath := filepath.Join(e.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(e.t, err)
	cmd := ragsyncCmd("serve", "--config", e.cfg)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(e.t, cmd.Start())
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }() // reaps the process
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if e.t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			e.t.Logf("%s log tail:\n%s", name, b)
		}
	})
	return p
}

// stop sends SIGTERM and waits for the process to exit.
func stopServe(t *testing.T, p *proc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill SIGKILLs p and waits for it to be gone.
func kill(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

// indexState renders what a schema's index holds: every document (live or
// deleted, with its version) and every chunk (position, hash, text), sorted.
func snapshotIndex(t *testing.T, schema string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var out []string
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT id, version, deleted_at IS NULL FROM %s.documents ORDER BY id`, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	for rows.Next() {
		var id, v string
		var live bool
		require.NoError(t, rows.Scan(&id, &v, &live))
		out = append(out, fmt.Sprintf("doc %s v=%s live=%t", id, v, live))
	}
	require.NoError(t, rows.Err())
	rows, err = conn.Query(ctx, fmt.Sprintf(`SELECT doc_id, position, content_hash, text FROM %s.chunks ORDER BY doc_id, position`, pgx.Identifier{schema}.Sanitize()))
	require.NoError(t, err)
	for rows.Next() {
		var id, h, text string
		var pos int
		require.NoError(t, rows.Scan(&id, &pos, &h, &text))
		out = append(out, fmt.Sprintf("chunk %s#%d %s %q", id, pos, h, text))
	}
	require.NoError(t, rows.Err())
	return out
}

// requireSameIndex compares two index states, reporting the first difference
// rather than two 10,000-line dumps.
func requireSameIndex(t *testing.T, want, got []string) {
	t.Helper()
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			require.Failf(t, "index differs", "line %d:\nwant %s\ngot  %s", i, want[i], got[i])
		}
	}
	require.Equal(t, len(want), len(got), "index sizes differ")
	require.NotEmpty(t, want)
}

var faultWords = strings.Fields(`river stone lantern harbour copper meadow falcon orchard glacier ember
	velvet canyon thistle compass marble juniper quartz willow saffron beacon tundra cobalt prairie
	lagoon cinder fjord hazel nimbus pebble sorrel tidal umber vesper yarrow zephyr alder bramble`)

// history generates n Debezium events over docs documents: creates, updates
// that change one paragraph (so unchanged chunks are kept), deletes and
// re-creates, with one increasing LSN. The same seed gives the same events.
func faultHistory(seed uint64, docs, n int) []article {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	para := func() string {
		ws := make([]string, 12+r.IntN(20))
		for i := range ws {
			ws[i] = faultWords[r.IntN(len(faultWords))]
		}
		return strings.Join(ws, " ") + "."
	}
	bodies := make([][]string, docs)
	var out []article
	lsn := int64(1000)
	for len(out) < n {
		id := r.IntN(docs)
		lsn += 10
		switch {
		case bodies[id] == nil:
			bodies[id] = []string{para(), para(), para()}
			out = append(out, article{op: "c", id: id, lsn: lsn, title: fmt.Sprintf("Doc %d", id), body: body(bodies[id]...), tenant: "acme"})
		case r.IntN(10) == 0:
			bodies[id] = nil
			out = append(out, article{op: "d", id: id, lsn: lsn})
		default:
			bodies[id][r.IntN(len(bodies[id]))] = para()
			if r.IntN(4) == 0 {
				bodies[id] = append(bodies[id], para())
			}
			out = append(out, article{op: "u", id: id, lsn: lsn, title: fmt.Sprintf("Doc %d", id), body: body(bodies[id]...), tenant: "acme"})
		}
	}
	return out
}

// cleanIndex replays events through one `serve --once` into a fresh schema:
// the reference every fault scenario must converge to.
func cleanRunIndex(t *testing.T, events []article) []string {
	t.Helper()
	w := newKafkaWorld(t, 3)
	w.produce(t, kafkaRecords(events))
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("clean"))
	stats := e.serveOnce()
	require.Zero(t, stats["dead_lettered"], "clean run: %v", stats)
	return snapshotIndex(t, e.schema)
}

// TestCrashRecovery SIGKILLs serve at random moments and restarts it; the
// index must end equal to a clean run's and nothing is dead-lettered.
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: long; skipped under -short")
	}
	t.Parallel() // own schemas, cluster and group; mostly waits (session timeouts, sleeps)
	// 2,600 events keep every kill mid-stream on a loaded machine (10 of 10
	// with 5,200) at half the suite time.
	events := faultHistory(4, 200, 2600)
	want := cleanRunIndex(t, events)

	w := newKafkaWorld(t, 3)
	w.produce(t, kafkaRecords(events))
	e := newEnv(t, "")
	writeConfigSource(t, e, w.source("crash"))
	r := rand.New(rand.NewPCG(7, 7))
	kills, midStream := 0, 0
	for kills < 10 {
		before := w.lagOf(t, "crash")
		p := e.startServe(fmt.Sprintf("serve-%d", kills))
		// Wait until this process has committed something (the group
		// first has to evict the member killed before, one session
		// timeout), then kill it at a random moment after.
		for i := 0; i < 300 && w.lagOf(t, "crash") == before && before > 0; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		// The kill lands after a random share (0-15%) of what was left
		// is committed, not after a random time: on a quiet machine a
		// time could outlast the whole backlog, on a busy one cover none.
		target := w.lagOf(t, "crash") * int64(85+r.IntN(16)) / 100
		for i := 0; i < 600 && w.lagOf(t, "crash") > target && !p.exited(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if lag := w.lagOf(t, "crash"); lag > 0 {
			t.Logf("kill %d with %d records left", kills, lag)
			midStream++
		}
		kill(t, p)
		kills++
	}
	final := e.startServe("serve-final")
	w.waitCaughtUp(t, "crash", 4*time.Minute, final)
	stopServe(t, final)
	t.Logf("crash: %d events, %d documents, %d SIGKILLs (%d mid-stream), %d dead letters", len(events), 200, kills, midStream, w.dlqCount(t))
	require.GreaterOrEqual(t, midStream, 3, "kills must land while work is in flight; raise the event count")
	require.Zero(t, w.dlqCount(t), "no dead letters")
	requireSameIndex(t, want, snapshotIndex(t, e.schema))
}
