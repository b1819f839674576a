package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

func newIndexCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "index",
		Short: "List, promote, roll back or drop the indexes in the schema",
	}
	cmd.AddCommand(newIndexListCmd(g), newIndexStatusCmd(g), newIndexDropCmd(g), newIndexPromoteCmd(g), newIndexRollbackCmd(g))
	return cmd
}

// indexInfo is one row of ragsync index list.
type indexInfo struct {
	Name       string `json:"name"`
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	// Type is how the index stores and indexes its vectors; HNSW its
	// HNSW parameters with the defaults filled in; RerankCandidates the
	// bit index's candidates re-ranked per query (0: the default, and
	// always for another type).
	Type             string    `json:"type"`
	HNSW             hnswInfo  `json:"hnsw"`
	RerankCandidates int       `json:"rerank_candidates"`
	Documents        int64     `json:"documents"`
	Chunks           int64     `json:"chunks"`
	Deleted          int64     `json:"deleted_chunks"`
	HNSWBytes        int64     `json:"hnsw_bytes"`
	State            string    `json:"state"`
	Follows          string    `json:"follows,omitempty"`
	Family           string    `json:"family,omitempty"`
	Aliases          []string  `json:"aliases,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	// ChunkGroups counts the index's chunk rows by model version and
	// chunker fingerprint.
	ChunkGroups []chunkGroupInfo `json:"chunk_groups"`
}

// hnswInfo is an index's HNSW parameters in ragsync index list --json.
type hnswInfo struct {
	M              int `json:"m"`
	EfConstruction int `json:"ef_construction"`
	EfSearch       int `json:"ef_search"`
}

// vectorTypeOf is t as the CLI prints it: an index recorded before types
// existed reads as vector.
func vectorTypeOf(t sink.VectorType) string {
	if t == "" {
		return string(sink.TypeVector)
	}
	return string(t)
}

// openCatalog opens the configured schema's catalog, migrated
// (service.OpenCatalog); the caller closes the pool.
func openCatalog(cmd *cobra.Command, cfg Config) (*pgxpool.Pool, *sink.Catalog, error) {
	return service.OpenCatalog(cmd.Context(), cfg.Postgres.URL, cfg.Postgres.Schema)
}

func newIndexListCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show each index with its model, dimensions, vector type, HNSW parameters, documents, chunks, HNSW size and state, and the aliases",
		Long: `list shows every index in postgres.schema and every alias. TYPE is how the
index stores and indexes its vectors (vector, halfvec or bit: index_type, or
reindex --index-type); M and EF_CONSTRUCTION are the HNSW parameters it was
built with, EF_SEARCH the candidate list its queries use (raised to k when k
is larger); --json adds rerank_candidates, a bit index's candidates per
query (0: the default). CHUNKS counts
the chunks of live documents (what queries can find); DELETED the chunks that
soft-deleted documents still hold until ragsync purge removes them. State is "live"
for an alias's target, and for the configured index (index:) when no alias
names it; else "building" (ragsync reindex is filling it), "caught-up"
(complete; serve writes every change to it too) or "retired" (the alias
moved away from it; still written, so ragsync index rollback loses nothing,
until ragsync index drop removes it). FAMILY is the alias (or plain index
name) the index was built for by reindex or made live under by promote; the
lifecycle commands refuse to mix families.

Below the indexes, CHUNKS BY PROVENANCE counts each index's chunk rows
(those of soft-deleted documents included) by the model version that
embedded them and the chunker settings (fingerprint) that cut them;
"unknown" is a row written before either was recorded. Several lines for
one index are a mix: ragsync index status NAME says what is left and what
finishes it. It only reads: a role with SELECT on the schema can run it.`,
		Example: `  ragsync index list --config ragsync.yaml [--json]`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, cat, err := service.OpenCatalogRead(cmd.Context(), cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			stats, aliases, err := cat.List(ctx, cfg.Index)
			if err != nil {
				return err
			}
			if _, err := cat.Lookup(ctx, cfg.Index); errors.Is(err, sink.ErrNoIndex) {
				// The list is still worth showing; the warning says why
				// nothing is live.
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: index: %v\n", err)
			} else if err != nil {
				return err
			}
			groups, err := cat.ChunkGroups(ctx, "")
			if err != nil {
				return err
			}
			byIndex := chunkGroupsByIndex(groups)
			infos := make([]indexInfo, len(stats))
			for i, x := range stats {
				h := x.HNSW.WithDefaults()
				infos[i] = indexInfo{Name: x.Name, Model: x.Model, Dimensions: x.Dimensions,
					Type: vectorTypeOf(x.Type), HNSW: hnswInfo{M: h.M, EfConstruction: h.EfConstruction, EfSearch: h.EfSearch}, RerankCandidates: x.Candidates,
					Documents: x.Documents, Chunks: x.Chunks, Deleted: x.DeletedChunks,
					HNSWBytes: x.HNSWBytes, State: x.State, Follows: x.Follows, Family: x.Family, Aliases: x.Aliases, CreatedAt: x.CreatedAt,
					ChunkGroups: byIndex[x.Name]}
				if infos[i].ChunkGroups == nil {
					infos[i].ChunkGroups = []chunkGroupInfo{}
				}
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
			fmt.Fprintln(tw, "NAME\tMODEL\tDIMENSIONS\tTYPE\tM\tEF_CONSTRUCTION\tEF_SEARCH\tDOCUMENTS\tCHUNKS\tDELETED\tHNSW\tSTATE\tFAMILY\tALIASES")
			for _, x := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f MiB\t%s\t%s\t%s\n", x.Name, x.Model, x.Dimensions,
					x.Type, x.HNSW.M, x.HNSW.EfConstruction, x.HNSW.EfSearch, x.Documents, x.Chunks, x.Deleted,
					float64(x.HNSWBytes)/(1<<20), x.State, dash(x.Family), strings.Join(x.Aliases, ","))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := printChunkGroups(out, infos); err != nil {
				return err
			}
			if len(aliases) > 0 {
				fmt.Fprintln(out)
				fmt.Fprintln(tw, "ALIAS\tINDEX\tPREVIOUS\tSWITCHED")
				for _, a := range aliases {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", a.Name, a.Index, dash(a.Previous), a.SwitchedAt.UTC().Format(time.RFC3339))
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object a line")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newIndexPromoteCmd(g *globals) *cobra.Command {
	var alias string
	var force bool
	cmd := &cobra.Command{
		Use:   "promote NEW",
		Short: "Point an alias (default: index:) at index NEW, atomically, with its SQL view",
		Long: `promote moves alias --alias (default: the configured index:) to index NEW in
one transaction, together with the view <alias>_chunks that SQL users query.
If no alias of that name exists yet it is created, and the index that
carries the name becomes its previous target, so index: keeps working
without a config change. Every command resolves index: on start (query on
every run); a running serve notices within index_poll and switches its
front door (bumping its cache generation). The old target is kept up to
date (retired) until ragsync index drop removes it, so ragsync index rollback
is instant and loses nothing. NEW must have caught up (ragsync reindex sets
that when done) unless --force. NEW must not be another alias's live index,
and not belong to another family (built by reindex for, or made live under,
another alias): --force promotes an index of another family anyway.`,
		Example: `  ragsync index promote articles_v2 --config ragsync.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("index promote takes one argument, the index to make live (NEW), got %d: run `ragsync index list --config <file>` to see the indexes and their states, then `ragsync index promote <name>`", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			if alias == "" {
				alias = cfg.Index
			}
			if !config.IndexName.MatchString(alias) {
				return fmt.Errorf("--alias %q: must be lower-case letters, digits and _ starting with a letter (at most 41 characters)", alias)
			}
			pool, cat, err := openCatalog(cmd, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			a, err := cat.Promote(cmd.Context(), alias, args[0], force)
			if err != nil {
				return err
			}
			return reportSwitch(cmd, cfg, a)
		},
	}
	cmd.Flags().StringVar(&alias, "alias", "", "alias to move (default: index: from the config)")
	cmd.Flags().BoolVar(&force, "force", false, "promote an index that is still building (has not caught up), or that belongs to another family")
	return cmd
}

func newIndexRollbackCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollback [ALIAS]",
		Short: "Move an alias (default: index:) back to its previous index",
		Long: `rollback moves ALIAS (default: the configured index:) back to the index it
pointed at before the last promote, with its view, in one transaction. serve
kept that index up to date meanwhile, so nothing is lost. It refuses when
that index was claimed by another family since (reindex --to it with
--force).`,
		Example: `  ragsync index rollback --config ragsync.yaml`,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			alias := cfg.Index
			if len(args) == 1 {
				alias = args[0]
			}
			pool, cat, err := openCatalog(cmd, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			a, err := cat.Rollback(cmd.Context(), alias)
			if err != nil {
				return err
			}
			return reportSwitch(cmd, cfg, a)
		},
	}
	return cmd
}

// reportSwitch prints the alias's new target and bumps the front door's
// cache generation when it is enabled (serve does too when it notices;
// this one makes the switch immediate for replicas that have not polled
// yet — their cache keys carry the physical index anyway).
func reportSwitch(cmd *cobra.Command, cfg Config, a sink.Alias) error {
	fmt.Fprintf(cmd.OutOrStdout(), "alias %s -> %s (previous: %s); SQL view %s.%s_chunks\n", a.Name, a.Index, dash(a.Previous), cfg.Postgres.Schema, a.Name)
	if !cfg.FrontDoor.Enabled {
		return nil
	}
	err := service.BumpFrontDoorGeneration(cmd.Context(), cfg.FrontDoorConfig())
	if err != nil {
		// The switch is done; cached answers are keyed by the physical
		// index, so none can cross indexes. Only the warning is due.
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not bump the front door's cache generation (%v); serve does it when it notices the switch\n", err)
	}
	return nil
}

func newIndexDropCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "drop NAME",
		Short: "Remove an index: its documents, chunks, HNSW index and view (the embedding cache stays)",
		Long: `drop removes index NAME from postgres.schema. It refuses the live index: the
target of an alias (roll back or promote another index first), or the
configured index (index:) when no alias names it; and an index a running
serve writes. It refuses an index of another family (one that reindex
built for, or promote made live under, another alias than index:), which is
almost always a typo; --force drops it anyway. Dropping an alias's previous
index removes its way back (rollback then has nowhere to go).`,
		Example: `  ragsync index drop articles_v1 --config ragsync.yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			pool, cat, err := openCatalog(cmd, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := cat.Drop(cmd.Context(), args[0], cfg.Index, force)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dropped index %s (%d documents)\n", args[0], res.Documents)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "drop an index that belongs to another family than the configured index:")
	return cmd
}
