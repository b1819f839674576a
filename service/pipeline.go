package service

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/fault"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// Conformance of the concrete stages to the pipeline's interfaces.
var (
	_ pipeline.Index       = (*sink.Store)(nil)
	_ pipeline.Splitter    = (*chunker.Chunker)(nil)
	_ pipeline.Source      = (*file.Source)(nil)
	_ pipeline.Source      = (*kafka.Source)(nil)
	_ pipeline.DeadLetters = (*file.DeadLetters)(nil)
	_ pipeline.DeadLetters = (*kafka.DeadLetters)(nil)
)

// PipelineConfig is what every pipeline of the service is built from
// (serve's, a backfill's, a re-index pass's).
type PipelineConfig struct {
	// Pipeline is the pipeline's own configuration; its Logger and
	// Registerer are set by NewPipeline, and its Reuse.Predictor is the
	// one NewPipeline is given.
	Pipeline pipeline.Config
	Chunker  chunker.Config
	Decoder  cdc.DecoderConfig
	// Debt is the background repayment of reuse debt (serve only).
	Debt pipeline.DebtConfig
}

// Stages are the parts of a pipeline that differ between uses.
type Stages struct {
	Source      pipeline.Source
	DeadLetters pipeline.DeadLetters
	// Target is the index the pipeline writes and its embedder: an opened
	// index's (Index.Target), in the mode the command writes it.
	Target pipeline.Target
	// Shadows are the other indexes of the target's family that a command
	// writing once (backfill) keeps in step; serve's family follower sets
	// them while it runs.
	Shadows []pipeline.Target
	// Traces, when not nil, is told each change's trace id, apply time and
	// failure (the monitor).
	Traces pipeline.TraceRecorder
	// Observer, when not nil, hears of every write (the front door).
	Observer pipeline.Observer
}

// NewPipeline wires every stage: the one constructor of every pipeline of
// the service (serve's, a backfill's, a re-index pass's, the benches'), so
// each honours every pipeline.* setting. pred, when not nil, is the reuse
// predictor the repayment shares.
func NewPipeline(cfg PipelineConfig, st Stages, pred *pipeline.Predictor, reg prometheus.Registerer, logger *slog.Logger) (*pipeline.Pipeline, error) {
	ch, err := chunker.New(cfg.Chunker)
	if err != nil {
		return nil, err
	}
	// Near-duplicate reuse: a chunk whose vector is predicted to stay
	// within monitor.cosine_bound of a fresh one takes a stored vector
	// instead of a call, and the repayment replaces it later.
	pc := cfg.Pipeline
	pc.Logger, pc.Registerer = logger, reg
	pc.Reuse.Predictor = pred
	return pipeline.New(pc, pipeline.Stages{
		Source:      st.Source,
		Splitter:    ch,
		Target:      st.Target,
		Shadows:     st.Shadows,
		DeadLetters: st.DeadLetters,
		Transient:   Transient,
		Fatal:       Fatal,
		Traces:      st.Traces,
		Observer:    st.Observer,
	})
}

// PipelineEmbedder is the embedder every pipeline calls (serve, backfill,
// reindex): for a remote provider a Coalescer, so that the chunks of the
// documents in flight share requests (a 3,000-row backfill costs about one
// request per max_batch_inputs texts, not one per row); queries keep the
// plain client, which must not linger. The offline embedder has nothing to
// share. stop closes the Coalescer once the pipeline has stopped. reg, when
// not nil, receives the coalescer's metrics. keep, when not nil, receives
// every answer as it arrives (embedder.CoalesceConfig.Keep) with the model
// the provider reported for it.
func PipelineEmbedder(ec embedder.Config, emb embedder.Client, reg prometheus.Registerer, keep func(context.Context, []string, [][]float32, string) error) (embedder.Client, func(), error) {
	if ec.Provider != embedder.ProviderOpenAI {
		return emb, func() {}, nil
	}
	cc := ec.Coalesce()
	if keep != nil {
		// Kept with the model the provider named in the answer just read.
		cc.Keep = func(ctx context.Context, texts []string, vecs [][]float32) error {
			return keep(ctx, texts, vecs, emb.ReportedModel())
		}
	}
	co := embedder.NewCoalescer(emb, cc)
	if reg != nil {
		if err := embedder.RegisterCoalescerMetrics(reg, co); err != nil {
			co.Close()
			return nil, nil, err
		}
	}
	return co, co.Close, nil
}

// Transient says which failures mean "a dependency is down, wait for it"
// rather than "this message is bad" (internal/fault's transient kind): the
// pipeline retries those without limit, which stops fetching until the
// dependency is back. Two more count as such here: a request that timed
// out (the provider is slow, not the text bad) and a reused vector whose
// origin left the embedding cache (the next try embeds it).
func Transient(err error) bool {
	return fault.IsTransient(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sink.ErrOriginGone)
}

// Fatal says which failures are configuration mistakes that every message
// would hit (internal/fault's fatal kind: wrong dimensions, bad key,
// unknown model, a lost privilege or dropped table): dead-lettering them
// one by one would empty the topic into the DLQ, so the pipeline stops and
// the error names the fix.
func Fatal(err error) bool { return fault.IsFatal(err) }
