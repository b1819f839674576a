package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// debtResult is what the repayment of reuse debt cost and left behind,
// with the repayment window run on the events' own timestamps.
type debtResult struct {
	Reuse  bool   `json:"reuse"`
	Repay  bool   `json:"repay"`
	Window string `json:"window"`
	// Slope is the reuse predictor's slope at the end, and Measured how
	// many repayments it learnt from.
	Slope    float64 `json:"predictor_slope"`
	Measured int64   `json:"predictor_measurements"`
	// Repayment spend, in tokens the embedding server counted.
	RepaidVectors int `json:"repaid_vectors"`
	FromCache     int `json:"repaid_from_cache"`
	RepayTokens   int `json:"repay_tokens"`
	// MaxDebtAge is the oldest debt seen at any round, in source time.
	MaxDebtAgeSeconds float64 `json:"max_debt_age_seconds"`
	// Fidelity checks during the replay: a uniform sample of stored
	// vectors against fresh embeddings, as the monitor takes it.
	Checks         int     `json:"fidelity_checks"`
	MaxShareOver   float64 `json:"max_uniform_share_over_bound"`
	Alarms         int     `json:"fidelity_alarms"`
	EndOutstanding int     `json:"debt_outstanding_before_final_window"`
	// After the replay and one more window: every stored vector against a
	// fresh embedding of its text.
	FinalChunks       int     `json:"final_chunks"`
	FinalPastBound    int     `json:"final_past_bound"`
	FinalMaxCosine    float64 `json:"final_max_cosine"`
	FinalDebt         int     `json:"final_debt_vectors"`
	RecallBeforeRepay float64 `json:"recall_at_5_before_final_repayment"`
	// Segments is how many pipeline runs the replay took (one per tick of
	// source time that holds events).
	Segments int `json:"segments"`
}

// replayRepaying replays the updates in segments of source time, each
// through its own pipeline run, and between segments lets the repayment
// run its rounds at the source time they would have run at (every
// Interval while there is debt, up to the next event). Fidelity is checked
// every checkEvery segments on a uniform sample of stored vectors.
func replayRepaying(ctx context.Context, cfg config, evs []event, first int, split chunker.Config, emb pipeline.Embedder,
	store *opSink, st *sink.Store, probe pipeline.Embedder, logger *slog.Logger) (pipeline.Snapshot, *debtResult, error) {
	if cfg.RepayWindow <= 0 {
		cfg.RepayWindow = 5 * time.Minute
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = 25
	}
	res := &debtResult{Reuse: !cfg.NoReuse, Repay: cfg.Repay, Window: cfg.RepayWindow.String()}
	pred := pipeline.NewPredictor(0)
	var clock time.Time
	reuse := pipeline.ReuseConfig{Disabled: cfg.NoReuse, Predictor: pred, NewWords: cfg.NewWords,
		Now: func(ts time.Time) time.Time { return ts }}
	rp, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: cfg.RepayWindow, Predictor: pred,
		Now: func() time.Time { return clock }, Logger: logger}, st, emb)
	if err != nil {
		return nil, nil, err
	}
	interval := cfg.RepayWindow / 10
	total := pipeline.Snapshot{}
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	round := func(upTo time.Time) error {
		// Rounds every interval from the clock up to (not past) upTo,
		// while there is debt.
		for !clock.After(upTo) {
			r, err := rp.RepayOnce(ctx)
			if err != nil {
				return err
			}
			res.RepaidVectors += r.Repaid
			res.FromCache += r.FromCache
			res.RepayTokens += r.Tokens
			if o := r.Outstanding; o.Vectors > 0 {
				res.MaxDebtAgeSeconds = max(res.MaxDebtAgeSeconds, clock.Sub(o.Oldest).Seconds())
			} else {
				return nil
			}
			clock = clock.Add(interval)
		}
		return nil
	}
	for i := 0; i < len(evs); {
		t0, err := time.Parse(time.RFC3339, evs[i].TS)
		if err != nil {
			return nil, nil, err
		}
		j := i + 1 // a segment holds at least one event
		for j < len(evs) {
			t, err := time.Parse(time.RFC3339, evs[j].TS)
			if err != nil {
				return nil, nil, err
			}
			if t.Sub(t0) >= interval {
				break
			}
			j++
		}
		lines, err := toLines(evs[i:j], first+i)
		if err != nil {
			return nil, nil, err
		}
		snap, err := replayWith(ctx, cfg, lines, split, emb, store, reuse, logger)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range snap {
			total[k] += v
		}
		res.Segments++
		last, _ := time.Parse(time.RFC3339, evs[j-1].TS)
		if clock.Before(last) {
			clock = last
		}
		next := last.Add(100 * 365 * 24 * time.Hour)
		if j < len(evs) {
			next, _ = time.Parse(time.RFC3339, evs[j].TS)
		}
		if cfg.Repay {
			if err := round(next.Add(-time.Millisecond)); err != nil {
				return nil, nil, err
			}
		}
		if res.Segments%cfg.CheckEvery == 0 {
			share, err := uniformShareOver(ctx, st, probe, rng, 64)
			if err != nil {
				return nil, nil, err
			}
			res.Checks++
			res.MaxShareOver = max(res.MaxShareOver, share)
			if share > 0.1 {
				res.Alarms++
			}
		}
		i = j
	}
	sum, err := st.OutstandingDebt(ctx, clock)
	if err != nil {
		return nil, nil, err
	}
	res.EndOutstanding = sum.Vectors
	res.Slope, res.Measured = pred.Slope()
	return total, res, nil
}

// finishWindow runs the repayment for one more window after the replay
// and measures every stored vector against a fresh embedding.
func finishWindow(ctx context.Context, cfg config, st *sink.Store, emb, probe pipeline.Embedder, res *debtResult, logger *slog.Logger) error {
	if cfg.RepayWindow <= 0 {
		cfg.RepayWindow = 5 * time.Minute
	}
	if cfg.Repay {
		last, err := st.NewestDebt(ctx)
		if err != nil {
			return err
		}
		clock := last
		rp, err := pipeline.NewRepayer(pipeline.DebtConfig{Window: cfg.RepayWindow, Now: func() time.Time { return clock }, Logger: logger}, st, emb)
		if err != nil {
			return err
		}
		for end := last.Add(cfg.RepayWindow); !clock.After(end); clock = clock.Add(cfg.RepayWindow / 10) {
			r, err := rp.RepayOnce(ctx)
			if err != nil {
				return err
			}
			res.RepaidVectors += r.Repaid
			res.FromCache += r.FromCache
			res.RepayTokens += r.Tokens
		}
	}
	sum, err := st.OutstandingDebt(ctx, time.Now())
	if err != nil {
		return err
	}
	res.FinalDebt = sum.Vectors
	dists, err := distances(ctx, st, nil, probe)
	if err != nil {
		return err
	}
	res.FinalChunks = len(dists)
	for _, d := range dists {
		if d > monitor.DefaultCosineBound {
			res.FinalPastBound++
		}
		res.FinalMaxCosine = max(res.FinalMaxCosine, d)
	}
	return nil
}

// uniformShareOver re-embeds n uniformly drawn stored chunks and returns
// the share whose stored vector is past the monitor's default bound: the
// monitor's fidelity alarm fires past 0.1.
func uniformShareOver(ctx context.Context, st *sink.Store, probe pipeline.Embedder, rng *rand.Rand, n int) (float64, error) {
	ids, err := st.ChunkIDs(ctx)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	pick := make([]int64, 0, n)
	for range n {
		pick = append(pick, ids[rng.IntN(len(ids))])
	}
	dists, err := distances(ctx, st, pick, probe)
	if err != nil {
		return 0, err
	}
	over := 0
	for _, d := range dists {
		if d > monitor.DefaultCosineBound {
			over++
		}
	}
	return float64(over) / float64(max(len(dists), 1)), nil
}

// distances re-embeds the chunks with the given ids (every chunk when
// nil) and returns each stored vector's cosine distance from the fresh one.
func distances(ctx context.Context, st *sink.Store, ids []int64, probe pipeline.Embedder) ([]float64, error) {
	stored, err := st.ChunkVectors(ctx, ids)
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(stored))
	vecs := make([][]float32, len(stored))
	for i, c := range stored {
		texts[i], vecs[i] = c.Text, c.Vector
	}
	fresh, err := embedAll(ctx, probe, texts)
	if err != nil {
		return nil, fmt.Errorf("embed stored chunks: %w", err)
	}
	out := make([]float64, len(texts))
	for i := range texts {
		out[i] = monitor.CosineDistance(vecs[i], fresh[i])
	}
	slices.Sort(out)
	return out, nil
}
