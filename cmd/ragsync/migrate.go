package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

func newMigrateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (serve does this too)",
		Long: `migrate creates the schema named by postgres.schema if it is absent and applies
every pending migration. It is safe to run any number of times and from
several processes at once (a session lock serialises them).`,
		Example: `  ragsync migrate --config ragsync.yaml
  ragsync migrate --postgres-url postgres://postgres@127.0.0.1:5432/app`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			if err := cfg.Validate(false); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			ctx := cmd.Context()
			pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			logger := newLogger(cmd.ErrOrStderr(), cfg.Log, false)
			n, err := migrations.Apply(ctx, pool, cfg.Postgres.Schema, logger)
			if err != nil {
				return err
			}
			if n == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "schema %s is up to date; nothing to apply\n", cfg.Postgres.Schema)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema %s: applied %d migration(s); it is now up to date\n", cfg.Postgres.Schema, n)
			return nil
		},
	}
}
