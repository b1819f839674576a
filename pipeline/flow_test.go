package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// heldEmbedder holds back the texts containing a word until released.
type heldEmbedder struct {
	countingEmbedder
	word    string
	release chan struct{}
	held    chan struct{} // closed when a held text arrived
	once    sync.Once
}

func (e *heldEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if strings.Contains(strings.Join(texts, " "), e.word) {
		e.once.Do(func() { close(e.held) })
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return e.countingEmbedder.Embed(ctx, texts)
}

func (e *heldEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return e.Embed(ctx, texts)
}

// TestSlowDocumentHoldsOnlyItsPartitionsPosition: partition 0 holds two
// documents, a slow one (its embedding held back) and three more;
// partition 1 holds five documents. While the slow document is held, the
// pipeline applies everything else and commits partition 1 to its end, and
// partition 0 exactly up to the slow document (offset 2), not past it,
// though the documents after it are applied. Once released, partition 0 is
// committed to its end.
func TestSlowDocumentHoldsOnlyItsPartitionsPosition(t *testing.T) {
	const topic = "dbserver1.public.docs"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	produce := func(part int32, id int, body string) {
		m := event("c", id, int64(id), body)
		require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: topic, Partition: part, Key: m.Key, Value: m.Value}).FirstErr())
	}
	for id := 1; id <= 6; id++ {
		body := fmt.Sprintf("Partition zero document %d about harbours and their lighthouses.", id)
		if id == 3 {
			body = "A glacier moves slowly down the valley, carving rock as it goes."
		}
		produce(0, id, body)
	}
	for id := 11; id <= 15; id++ {
		produce(1, id, fmt.Sprintf("Partition one document %d about orchards and their bees.", id))
	}

	src, err := kafka.NewSource(kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{topic}, Group: "slow", MaxPollRecords: 1})
	require.NoError(t, err)
	t.Cleanup(src.Close)
	b := setup(t)
	emb := &heldEmbedder{word: "glacier", release: make(chan struct{}), held: make(chan struct{})}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t),
		DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: emb},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	adm := kadm.NewClient(cl)
	committed := func() map[int32]int64 {
		out := map[int32]int64{}
		resp, err := adm.FetchOffsets(t.Context(), "slow")
		require.NoError(t, err)
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return out
	}
	applied := func(id int) bool {
		_, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
		return ok
	}
	<-emb.held
	require.Eventually(t, func() bool {
		c := committed()
		return c[1] == 5 && c[0] == 2 && applied(4) && applied(5) && applied(6)
	}, 30*time.Second, 20*time.Millisecond, "partition 1 committed to its end, partition 0 up to the slow document, and partition 0's later documents applied while the slow one is held (committed %v)", committed())
	require.False(t, applied(3), "the slow document is still held")
	// Give a wrong commit every chance to happen before checking it did not.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(2), committed()[0], "partition 0 is committed exactly up to the slow document")

	close(emb.release)
	require.Eventually(t, func() bool { return committed()[0] == 6 }, 30*time.Second, 20*time.Millisecond,
		"partition 0 committed to its end once the slow document is applied (committed %v)", committed())
	require.True(t, applied(3))
}

// orderSink checks, per document, that no write starts before the previous
// write of the same document returned, and that versions only increase.
type orderSink struct {
	pipeline.Index
	mu       sync.Mutex
	busy     map[string]bool
	last     map[string]string
	problems []string
	writes   int
}

func (s *orderSink) enter(id, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] {
		s.problems = append(s.problems, fmt.Sprintf("%s: write of %s began while an earlier one was in flight", id, version))
	}
	s.busy[id] = true
	s.writes++
}

func (s *orderSink) leave(id, version string, out sink.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[id] = false
	if out.Stale {
		s.problems = append(s.problems, fmt.Sprintf("%s: %s arrived after a later version", id, version))
	}
	s.last[id] = version
}

func (s *orderSink) Upsert(ctx context.Context, d sink.Document) (sink.Outcome, error) {
	s.enter(d.ID, d.Version.String())
	// A random pause widens the window in which a later change of the
	// same document could overtake this one.
	time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
	out, err := s.Index.Upsert(ctx, d)
	s.leave(d.ID, d.Version.String(), out)
	return out, err
}

// TestChangeNeverVisibleBeforeAnEarlierChangeOfItsDocument: many versions
// of a few documents, spread over many small batches with the pipeline
// fetching ahead and no cap on concurrency, and an embedder whose latency
// varies: every document's writes happen one at a time in version order
// (none is stale), and the index ends at each document's last version.
func TestChangeNeverVisibleBeforeAnEarlierChangeOfItsDocument(t *testing.T) {
	b := setup(t)
	var batches [][]cdc.Record
	const docs, versions = 4, 25
	var batch []cdc.Record
	for v := 1; v <= versions; v++ {
		for id := 1; id <= docs; id++ {
			batch = append(batch, event("u", id, int64(v*100+id), fmt.Sprintf("doc %d version %d. %s", id, v, paraA)))
			if len(batch) == 3 {
				batches = append(batches, batch)
				batch = nil
			}
		}
	}
	batches = append(batches, batch)
	src := &sliceSource{batches: batches}
	os := &orderSink{Index: b.store, busy: map[string]bool{}, last: map[string]string{}}
	b.emb.fail = func([]string) error {
		time.Sleep(time.Duration(rand.IntN(4)) * time.Millisecond)
		return nil
	}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t),
		DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: os, Embedder: unlockedEmbedder{b.emb}},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, os.problems)
	require.Equal(t, docs*versions, os.writes)
	require.Zero(t, p.Stats()["stale"])
	require.EqualValues(t, len(batches), src.acked.Load())
	for id := 1; id <= docs; id++ {
		txt, ok := b.text(t, fmt.Sprintf("public.docs/%d", id))
		require.True(t, ok)
		require.Contains(t, txt, fmt.Sprintf("version %d.", versions))
	}
}

// unlockedEmbedder calls countingEmbedder's failure hook outside its lock,
// so calls of different documents overlap.
type unlockedEmbedder struct{ e *countingEmbedder }

func (u unlockedEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if u.e.fail != nil {
		if err := u.e.fail(texts); err != nil {
			return nil, err
		}
	}
	inner := &countingEmbedder{}
	return inner.Embed(ctx, texts)
}

func (u unlockedEmbedder) EmbedCounted(ctx context.Context, texts []string, _ []int) ([][]float32, error) {
	return u.Embed(ctx, texts)
}

// bufferingSink holds upserts until Flush, like the bulk loader.
type bufferingSink struct {
	pipeline.Index
	mu       sync.Mutex
	buffered map[string]bool
	flushed  map[string]bool
	flushes  int
}

func (s *bufferingSink) Upsert(_ context.Context, d sink.Document) (sink.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buffered[d.ID] = true
	return sink.Outcome{Applied: true}, nil
}

func (s *bufferingSink) Flush(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.buffered {
		s.flushed[id] = true
	}
	clear(s.buffered)
	s.flushes++
	return nil
}

// checkedSource acknowledges a batch only if every document of it was
// flushed, and records a violation otherwise.
type checkedSource struct {
	sliceSource
	snk      *bufferingSink
	mu       sync.Mutex
	problems []string
}

func (s *checkedSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	b, err := s.sliceSource.Fetch(ctx)
	if err != nil {
		return b, err
	}
	msgs, ack := b.Records, b.Ack
	b.Ack = func(ctx context.Context) error {
		s.snk.mu.Lock()
		for _, m := range msgs {
			ch, err := cdc.NewDecoder(cdc.DecoderConfig{}).Decode(m)
			if err == nil && !s.snk.flushed[pipeline.DocID(ch)] {
				s.mu.Lock()
				s.problems = append(s.problems, pipeline.DocID(ch)+" acknowledged before it was flushed")
				s.mu.Unlock()
			}
		}
		s.snk.mu.Unlock()
		return ack(ctx)
	}
	return b, nil
}

// TestCommitHookRunsBeforeEveryAcknowledgement: with a buffering sink as
// Stages.Commit, no batch is acknowledged before its documents were
// flushed; no source has to wrap itself to get this.
func TestCommitHookRunsBeforeEveryAcknowledgement(t *testing.T) {
	b := setup(t)
	snk := &bufferingSink{Index: b.store, buffered: map[string]bool{}, flushed: map[string]bool{}}
	var batches [][]cdc.Record
	for i := range 10 {
		batches = append(batches, []cdc.Record{
			event("c", 2*i+1, int64(10*i+1), fmt.Sprintf("doc %d. %s", 2*i+1, paraA)),
			event("c", 2*i+2, int64(10*i+2), fmt.Sprintf("doc %d. %s", 2*i+2, paraB)),
		})
	}
	src := &checkedSource{sliceSource: sliceSource{batches: batches}, snk: snk}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t),
		DeadLetters: b.dlq, Target: pipeline.Target{Name: "docs", Index: snk, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	require.Empty(t, src.problems)
	require.EqualValues(t, 10, src.acked.Load())
	require.Len(t, snk.flushed, 20)
	require.Positive(t, snk.flushes)
}

// msgDLQ keeps the dead-lettered messages and causes.
type msgDLQ struct {
	mu     sync.Mutex
	msgs   []cdc.Record
	causes []error
}

func (d *msgDLQ) Put(_ context.Context, m cdc.Record, cause error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.msgs = append(d.msgs, m)
	d.causes = append(d.causes, cause)
	return nil
}

// TestSourceDecodedMessagesNeedNoPipelineDecoder: the file source decodes
// Debezium JSON itself; the pipeline, without a decoder, applies the good
// line and dead-letters the bad one with its original bytes, coordinates
// and reason.
func TestSourceDecodedMessagesNeedNoPipelineDecoder(t *testing.T) {
	b := setup(t)
	good := event("c", 1, 10, paraA)
	path := t.TempDir() + "/events.jsonl"
	bad := `{"op":"c","source":{"connector":"postgresql"`
	line := fmt.Sprintf(`{"key":%s,"value":%s}`, good.Key, good.Value)
	require.NoError(t, os.WriteFile(path, []byte(line+"\n"+bad+"\n"), 0o600))
	src, err := file.NewSource(file.Config{Path: path, Decoder: cdc.NewDecoder(cdc.DecoderConfig{})})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	dlq := &msgDLQ{}
	p, err := pipeline.New(pipeline.Config{RetryBackoff: 1, MaxRetryBackoff: 2}, pipeline.Stages{
		Source: src, Splitter: mustChunker(t), DeadLetters: dlq, Target: pipeline.Target{Name: "docs", Index: b.store, Embedder: b.emb},
	})
	require.NoError(t, err)
	require.NoError(t, p.Run(t.Context()))
	txt, ok := b.text(t, "public.docs/1")
	require.True(t, ok)
	require.Equal(t, paraA, txt)
	require.Len(t, dlq.msgs, 1)
	require.Equal(t, bad, string(dlq.msgs[0].Value), "the original bytes")
	require.EqualValues(t, 2, dlq.msgs[0].Offset, "its line")
	var de *cdc.DecodeError
	require.ErrorAs(t, dlq.causes[0], &de, "the reason is the decoder's")
}

func (e *heldEmbedder) ReportedModel() string { return "" }

func (u unlockedEmbedder) ReportedModel() string { return "" }
