package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/service"
)

func newBloomCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bloom",
		Short: "Maintain the front door's Bloom filters of known tenants and documents",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "rebuild",
		Short: "Rebuild the tenant and document Bloom filters from the index",
		Long: `rebuild reads every live document of the index and replaces the front door's
Bloom filters in Redis (built beside the live ones and swapped in, so queries
keep working meanwhile). serve does this at start; run it after restoring a
backup or changing frontdoor.bloom settings.`,
		Example: `  ragsync bloom rebuild --config ragsync.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			logger := newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false)
			ix, err := openIndex(ctx, cfg, logger, nil)
			if err != nil {
				return err
			}
			defer ix.Close()
			n, err := service.RebuildBloom(ctx, cfg.FrontDoorConfig(), ix, logger)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bloom filters rebuilt from %d document(s)\n", n)
			return nil
		},
	})
	return cmd
}
