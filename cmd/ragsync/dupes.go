package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/chunker"
)

func newDupesCmd(g *globals) *cobra.Command {
	var (
		minScore int
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "dupes",
		Short: "List near-duplicate documents of the index with their similarity",
		Long: `dupes compares every pair of live documents and lists those at least
--min-score similar (0-100), best first. Documents compare by their ssdeep
hash; ssdeep needs more than 4096 bytes of text, so a pair with a shorter
document compares by 3-word shingle similarity instead, and the method column
says so. The comparison is over all pairs: minutes for tens of thousands of
documents.

Example:
  ragsync dupes --config ragsync.yaml --min-score 80
  ragsync dupes --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if minScore < 0 || minScore > 100 {
				return fmt.Errorf("--min-score %d: must be 0..100", minScore)
			}
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			ix, err := openIndexRead(ctx, cfg, newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false))
			if err != nil {
				return err
			}
			defer ix.Close()
			st := ix.Store
			dupes, err := st.Dupes(ctx, minScore)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, d := range dupes {
					if err := enc.Encode(map[string]any{"a": d.A, "b": d.B, "score": d.Score, "method": d.Method}); err != nil {
						return err
					}
				}
				return nil
			}
			if len(dupes) == 0 {
				_, err := fmt.Fprintf(out, "no document pairs at or above %d\n", minScore)
				return err
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCORE\tMETHOD\tDOCUMENT A\tDOCUMENT B")
			short := false
			for _, d := range dupes {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", d.Score, d.Method, d.A, d.B)
				short = short || d.Method == chunker.MethodShingle
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if short {
				_, err = fmt.Fprintf(out, "\nshingle: at least one text is at most %d bytes, under ssdeep's minimum; scored by 3-word shingle similarity\n", chunker.FuzzyMinBytes)
			}
			return err
		},
	}
	cmd.Flags().IntVar(&minScore, "min-score", 80, "least similarity to list, 0-100")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	return cmd
}
