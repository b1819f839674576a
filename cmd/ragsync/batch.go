package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/ragsync/ragsync/service"
)

// batchFlagHelp is the --batch flag's help on reindex and backfill.
const batchFlagHelp = "embed through the provider's Batch API first (half price, done within 24h; embedder.batch.enabled); a rerun resumes the recorded batches"

// batchProgress reports the batch lane: a bar of batches done on w when
// it is a terminal, else a log line whenever a batch ends.
func batchProgress(w io.Writer, tty bool, logger *slog.Logger) func(service.BatchProgress) {
	if !tty {
		return func(p service.BatchProgress) {
			logger.Info("batch lane progress", "batches_done", p.Done, "batches", p.Batches,
				"texts", p.Inputs, "applied", p.Applied, "fallback_online", p.Failed)
		}
	}
	var bar *progressbar.ProgressBar
	return func(p service.BatchProgress) {
		if p.Batches == 0 {
			return // nothing to submit: the summary line says so
		}
		if bar == nil {
			bar = progressbar.NewOptions(p.Batches, progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("batch lane"), progressbar.OptionShowCount(),
				progressbar.OptionSetItsString("batches"), progressbar.OptionThrottle(200*time.Millisecond))
		}
		bar.ChangeMax(p.Batches)
		bar.Describe(fmt.Sprintf("batch lane (%d of %d texts cached)", p.Applied, p.Inputs))
		_ = bar.Set(p.Done)
		if p.Done == p.Batches {
			_ = bar.Finish()
			fmt.Fprintln(w)
		}
	}
}

// batchSummary is the batch lane's summary line.
func batchSummary(r service.BatchResult) string {
	return fmt.Sprintf("batch lane: %d texts to embed after the cache; %d batches created, %d resumed; %d vectors cached from batches, %d texts left to online requests; %s",
		r.Texts, r.Created, r.Resumed, r.Applied, r.Fallback, r.Took.Round(time.Millisecond))
}
