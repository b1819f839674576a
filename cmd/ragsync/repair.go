package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/monitor"
	"github.com/ragsync/ragsync/service"
)

func newRepairCmd(g *globals) *cobra.Command {
	var (
		maxTokens, batch int
		dryRun, asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Re-embed the chunks measured past the fidelity bound",
		Long: `repair re-embeds exactly the chunks whose last measured cosine distance
(serve's monitor, or ragsync fidelity check) is past monitor.cosine_bound and
whose text has not changed since: each gets the vector of its own text, the
cache entry of that text is replaced, and the measurement is dropped. Chunks
never measured are left alone; measure more with fidelity check --sample N.
serve replaces every reused vector within reuse.repay_window on its own; repair
is for vectors the monitor measured past the bound for another reason (the
model behind the name changed).
--max-tokens stops before the budget would be exceeded.

Example:
  ragsync fidelity check --sample 500 ; ragsync repair --max-tokens 200000
  ragsync repair --dry-run --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			logger := newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false)
			// A repair draws the provider budget after serve's live changes.
			cfg.Embedder.Lane = embedder.LaneBackfill
			// A dry run only reads: it migrates, registers and deletes nothing.
			open := func() (*service.Index, error) { return openIndex(cmd.Context(), cfg, logger, nil) }
			if dryRun {
				open = func() (*service.Index, error) { return openIndexRead(cmd.Context(), cfg, logger) }
			}
			ix, err := open()
			if err != nil {
				return err
			}
			defer ix.Close()
			m, closeMon, err := service.OpenMonitor(cmd.Context(), cfg.monitorConfig(), ix, logger)
			if err != nil {
				return err
			}
			defer closeMon()
			opts := monitor.RepairOptions{MaxTokens: maxTokens, BatchSize: batch, DryRun: dryRun}
			var bar *progressbar.ProgressBar
			switch {
			case asJSON || dryRun:
			case !g.stderrTTY:
				// A bar's carriage returns make one unreadable line in a
				// log file or CI output: say where the run is in lines.
				opts.Progress = repairProgressLines(cmd.ErrOrStderr(), 10*time.Second, time.Now)
			default:
				opts.Progress = func(done, total int) {
					if bar == nil {
						bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
							progressbar.OptionSetDescription("re-embedding"), progressbar.OptionShowCount())
					}
					_ = bar.Set(done)
				}
			}
			res, err := m.Repair(cmd.Context(), ix.Store, opts)
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(res)
			}
			if dryRun {
				_, err = fmt.Fprintf(out, "%d chunks past the bound would be re-embedded (%d stale measurements dropped)\n", res.Pending, res.Stale)
				return err
			}
			_, err = fmt.Fprintf(out, "re-embedded %d of %d chunks past the bound with %d tokens; %d left for lack of budget; %d stale measurements dropped\n",
				res.Repaired, res.Pending, res.Tokens, res.BudgetLeft, res.Stale)
			return err
		},
	}
	cmd.Flags().IntVar(&maxTokens, "max-tokens", 0, "token budget of this run (0: no limit)")
	cmd.Flags().IntVar(&batch, "batch", 64, "chunks per embedding request")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be re-embedded, embed nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// repairProgressLines reports a repair's progress as lines, for a stderr
// that is not a terminal: one when it starts, then at most one per every
// (as backfill's progress lines), and one when every chunk is done.
func repairProgressLines(w io.Writer, every time.Duration, now func() time.Time) func(done, total int) {
	var start, last time.Time
	return func(done, total int) {
		t := now()
		if start.IsZero() {
			start, last = t, t
			fmt.Fprintf(w, "repair: re-embedding %d chunks past the bound\n", total)
			return
		}
		if done < total && t.Sub(last) < every {
			return
		}
		last = t
		rate := float64(done) / max(t.Sub(start).Seconds(), 1e-9)
		eta := "unknown"
		switch {
		case done >= total:
			eta = "0s"
		case rate > 0:
			eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
		}
		fmt.Fprintf(w, "repair progress: %d of %d chunks re-embedded, %s elapsed, %.0f chunks/s, eta %s\n",
			done, total, t.Sub(start).Round(time.Second), rate, eta)
	}
}
