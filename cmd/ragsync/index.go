package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/migrations"
	"github.com/ragsync/ragsync/sink"
)

func newIndexCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "index",
		Short: "List or drop the indexes in the schema",
	}
	cmd.AddCommand(newIndexListCmd(g), newIndexDropCmd(g))
	return cmd
}

// indexInfo is one row of ragsync index list.
type indexInfo struct {
	Name       string    `json:"name"`
	Model      string    `json:"model"`
	Dimensions int       `json:"dimensions"`
	Documents  int64     `json:"documents"`
	Chunks     int64     `json:"chunks"`
	HNSWBytes  int64     `json:"hnsw_bytes"`
	State      string    `json:"state"`
	CreatedAt  time.Time `json:"created_at"`
}

func newIndexListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show each index with its model, dimensions, documents, chunks, HNSW size and state",
		Long: `list shows every index in postgres.schema. State is "live" for the index the
config names (index:), "built" for the others.`,
		Example: `  ragsync index list --config ragsync.yaml [--json]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := migrations.Up(ctx, pool, cfg.Postgres.Schema, nil); err != nil {
				return err
			}
			rows, err := pool.Query(ctx, `SELECT i.name, i.model, i.dimensions, i.created_at,
				(SELECT count(*) FROM documents d WHERE d.index_name = i.name AND d.deleted_at IS NULL),
				(SELECT count(*) FROM chunks c WHERE c.index_name = i.name),
				coalesce(pg_relation_size(to_regclass(quote_ident($1) || '.' || quote_ident('chunks_hnsw_' || i.name))), 0)
				FROM indexes i ORDER BY i.name`, cfg.Postgres.Schema)
			if err != nil {
				return fmt.Errorf("list indexes: %w", err)
			}
			infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (indexInfo, error) {
				var x indexInfo
				err := r.Scan(&x.Name, &x.Model, &x.Dimensions, &x.CreatedAt, &x.Documents, &x.Chunks, &x.HNSWBytes)
				x.State = "built"
				if x.Name == cfg.Index {
					x.State = "live"
				}
				return x, err
			})
			if err != nil {
				return fmt.Errorf("list indexes: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				for _, x := range infos {
					if err := enc.Encode(x); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tMODEL\tDIMENSIONS\tDOCUMENTS\tCHUNKS\tHNSW\tSTATE")
			for _, x := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f MiB\t%s\n", x.Name, x.Model, x.Dimensions, x.Documents, x.Chunks, float64(x.HNSWBytes)/(1<<20), x.State)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object a line")
	return cmd
}

func newIndexDropCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "drop NAME",
		Short: "Remove an index: its documents, chunks and HNSW index (the embedding cache stays)",
		Long: `drop removes index NAME from postgres.schema. It refuses the configured index
(index:): switch the config to another index first.`,
		Example: `  ragsync index drop articles_v1 --config ragsync.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			name := args[0]
			if name == cfg.Index {
				return fmt.Errorf("index drop %s: it is the configured index (index:); point index: at another index first", name)
			}
			if !indexName.MatchString(name) {
				return fmt.Errorf("index drop %q: not an index name", name)
			}
			ctx := cmd.Context()
			pool, err := sink.OpenPool(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			var docs int64
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM documents WHERE index_name = $1", name).Scan(&docs); err != nil {
					return err
				}
				// Chunks reference documents, documents the index: the
				// cascade removes both, and the checkpoints.
				tag, err := tx.Exec(ctx, "DELETE FROM indexes WHERE name = $1", name)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					return fmt.Errorf("no index %q in schema %s (ragsync index list shows them)", name, cfg.Postgres.Schema)
				}
				_, err = tx.Exec(ctx, "DROP INDEX IF EXISTS "+pgx.Identifier{cfg.Postgres.Schema, "chunks_hnsw_" + name}.Sanitize())
				return err
			})
			if err != nil {
				return fmt.Errorf("index drop %s: %w", name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dropped index %s (%d documents)\n", name, docs)
			return nil
		},
	}
}
