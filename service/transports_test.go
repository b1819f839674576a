package service

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// downErr is a dependency that does not answer: the pipeline retries it
// without limit, which is what stalls it.
type downErr struct{ what string }

func (e downErr) Error() string   { return e.what + ": connection refused" }
func (e downErr) Transient() bool { return true }

// stallingSource hands over a batch whose one message is a skip (its
// acknowledgement is then the next step) or a change that could not be
// decoded (it is dead-lettered first), and a second such batch once the
// first is being acknowledged; then nothing more. Its acknowledgements
// fail while ackDown. (A stall is that of the oldest batch not yet taken to
// be acknowledged: the second one, behind the first's failing
// acknowledgement.)
type stallingSource struct {
	msg     cdc.Record
	ackDown bool
	fetched atomic.Int32
	acking  chan struct{}
	once    sync.Once
}

func (s *stallingSource) Fetch(ctx context.Context) (cdc.Batch, error) {
	switch s.fetched.Add(1) {
	case 1:
	case 2:
		select {
		case <-s.acking:
		case <-ctx.Done():
			return cdc.Batch{}, ctx.Err()
		}
	default:
		<-ctx.Done()
		return cdc.Batch{}, ctx.Err()
	}
	return cdc.Batch{Records: []cdc.Record{s.msg}, Ack: func(context.Context) error {
		s.once.Do(func() { close(s.acking) })
		if s.ackDown {
			return downErr{"commit the source position"}
		}
		return nil
	}}, nil
}

// downDeadLetters is a dead-letter destination that does not answer.
type downDeadLetters struct{}

func (downDeadLetters) Put(context.Context, cdc.Record, error) error {
	return downErr{"write the dead letter"}
}

// TestStallAdviceIsTheConfiguredTransports: a stalled source's summary
// names the settings of the configured transport, for each transport and
// each stage it serves (its acknowledgements, its dead letters), and never
// another transport's: a stalled Postgres source was once told to check
// source.kafka.brokers. The pipeline's configuration is built as the
// command builds it from ragsync.yaml, and then as serve builds it.
func TestStallAdviceIsTheConfiguredTransports(t *testing.T) {
	_, schema := pgtest.Schema(t)
	ctx := t.Context()
	ix, err := Open(ctx, IndexConfig{URL: pgtest.URL(), Schema: schema, Index: "stall",
		Embedder: embedder.Config{Provider: "hashing", Dimensions: 16}.WithDefaults()}, sink.Write, nil, nil)
	require.NoError(t, err)
	t.Cleanup(ix.Close)

	for _, tc := range []struct {
		kind string
		// own are what the summary must name for each stage.
		source, deadLetters string
	}{
		{"postgres", "source.postgres.url", "dlq.path"},
		{"file", "source.file.path", "dlq.path"},
		{"kafka", "source.kafka.brokers", "dlq.topic"},
		{"redis-streams", "source.redis_streams.url", "<stream>.ragsync-dlq"},
	} {
		for _, stage := range []string{pipeline.StageSource, pipeline.StageDeadLetters} {
			t.Run(tc.kind+"/"+stage, func(t *testing.T) {
				c := config.Default()
				c.Source.Kind = tc.kind
				pc := c.PipelineConfig(nil, nil)
				pc.StallAfter, pc.StallLogInterval = 50*time.Millisecond, 20*time.Millisecond
				pc.DeadLetterMaxRatio = 1 // the one dead letter must not stop the run
				pc.RetryBackoff = 10 * time.Millisecond
				cfg := Config{Source: SourceConfig{Kind: tc.kind}, Pipeline: PipelineConfig{Pipeline: pc, Chunker: c.ChunkerConfig()}}
				spc, err := cfg.servePipelineConfig()
				require.NoError(t, err)

				src := &stallingSource{msg: cdc.Record{Raw: cdc.Raw{Topic: "t"}, Err: cdc.ErrSkip}, ackDown: true, acking: make(chan struct{})}
				var dlq pipeline.DeadLetters = downDeadLetters{}
				if stage == pipeline.StageSource {
					dlq = nil
				} else {
					src = &stallingSource{msg: cdc.Record{Raw: cdc.Raw{Topic: "t"}, Err: errors.New("not a Debezium event")}, acking: make(chan struct{})}
				}
				var logs lockedLog
				logger := slog.New(slog.NewJSONHandler(&logs, nil))
				p, err := NewPipeline(spc, Stages{Source: src, DeadLetters: dlq, Target: pipeline.Target{Name: ix.Name, Index: ix.Store, Embedder: ix.Emb}}, nil, nil, logger)
				require.NoError(t, err)
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- p.Run(rctx) }()
				var check string
				require.Eventually(t, func() bool {
					var found bool
					check, found = stallCheck(t, logs.String(), stage)
					return found
				}, 30*time.Second, 20*time.Millisecond, "no stall summary for %s", stage)
				cancel()
				<-done

				own := map[string]string{pipeline.StageSource: tc.source, pipeline.StageDeadLetters: tc.deadLetters}[stage]
				require.Contains(t, check, own)
				for _, other := range Transports() {
					if other != tc.kind {
						section := "source." + strings.ReplaceAll(other, "-", "_") + "." // its YAML key
						require.NotContains(t, check, section, "a %s source's stall names another transport's settings", tc.kind)
					}
				}
			})
		}
	}
}

// stallCheck is the setting the latest stall summary for stage names, and
// whether there is one.
func stallCheck(t *testing.T, logs, stage string) (check string, found bool) {
	t.Helper()
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, "pipeline stalled") {
			continue
		}
		var rec struct{ Failing, Check string }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		if rec.Failing == stage {
			check, found = rec.Check, true
		}
	}
	return check, found
}

// TestUnknownTransportNamesTheKnownOnes: an unknown source.kind opens
// nothing; the error lists the kinds and the nearest one.
func TestUnknownTransportNamesTheKnownOnes(t *testing.T) {
	_, _, err := OpenDeadLetters(SourceConfig{Kind: "kafak"}, "list")
	require.ErrorContains(t, err, `source.kind: "kafak" is not one of file, kafka, postgres, redis-streams; did you mean kafka?`)
	_, err = newSource(t.Context(), SourceConfig{Kind: ""}, cdc.DecoderConfig{}, true, nil, nil, nil, slog.Default())
	require.ErrorContains(t, err, `source.kind: "" is not one of file, kafka, postgres, redis-streams`)
	_, err = Config{Source: SourceConfig{Kind: "ftp"}}.servePipelineConfig()
	require.ErrorContains(t, err, `"ftp" is not one of`)
}

// lockedLog is a log the pipeline's goroutines write while the test reads.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
