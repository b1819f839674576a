package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

func newSlotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slot",
		Short: "Manage the Postgres source's replication slot",
		Long: `slot manages the logical replication slot of source.kind postgres.

A slot keeps WAL on the source server until ragsync confirms it: when ragsync
is retired (or the slot was invalidated), drop the slot so the source's disk
does not fill. The next serve creates a new slot and loads the tables again.`,
		Example: `  ragsync slot drop --config ragsync.yaml`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:          "drop",
		Short:        "Drop the replication slot (stop serve first)",
		Long:         "drop removes source.postgres.slot from the source server and forgets its initial load.\n\nExample:\n  ragsync slot drop --config ragsync.yaml",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			if err := errors.Join(cfg.validatePostgresSource()...); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx := cmd.Context()
			pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := migrations.Up(ctx, pool, cfg.Postgres.Schema, newLogger(cmd.ErrOrStderr(), cfg.Log, false)); err != nil {
				return err
			}
			pc := cfg.postgresSourceConfig(loadState{pool}, nil, nil)
			if err := cdc.DropSlot(ctx, pc); err != nil {
				return err
			}
			slot := pc.Slot
			if slot == "" {
				slot = "ragsync"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "replication slot %s dropped\n", slot)
			return nil
		},
	})
	return cmd
}
