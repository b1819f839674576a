package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/service"
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
	var force bool
	drop := &cobra.Command{
		Use:   "drop",
		Short: "Drop the replication slot ragsync created, and its publication (stop serve first)",
		Long: `drop removes source.postgres.slot from the source server, and
source.postgres.publication when ragsync created it and no other slot of the
database streams from it, and forgets the slot's initial loads, so the next
serve creates both again and loads the tables.

It drops only a slot ragsync recorded creating: another tool's slot of the
same name (or one created by a ragsync that did not record it yet) needs
--force. It never drops a slot of another database, --force or not: it says
which database the slot belongs to and how to drop it there by hand. A
publication ragsync did not create is never dropped; one that another slot
streams from (or may: an idle slot no ragsync record explains) is kept, and
drop prints why and the DROP PUBLICATION to run once nothing streams from it.

Example:
  ragsync slot drop --config ragsync.yaml
  ragsync slot drop --config ragsync.yaml --force`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			if err := errors.Join(cfg.ValidatePostgresSource()...); err != nil {
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
			pc := cfg.PostgresSourceConfig(service.SourceState(pool), nil, nil)
			dropped, err := pgrepl.Drop(ctx, pc, force)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if dropped.Slot {
				fmt.Fprintf(out, "replication slot %s dropped\n", dropped.SlotName)
			}
			if dropped.Publication {
				fmt.Fprintf(out, "publication %s dropped (ragsync had created it)\n", dropped.PublicationName)
			}
			if dropped.PublicationKept != "" {
				fmt.Fprintln(out, dropped.PublicationKept)
			}
			return nil
		},
	}
	drop.Flags().BoolVar(&force, "force", false, "drop the slot even if ragsync did not create it (another tool's slot of the same name in this database; never another database's)")
	cmd.AddCommand(drop)
	return cmd
}
