package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/sink"
)

func newPurgeCmd(g *globals) *cobra.Command {
	var (
		olderThan, cacheOlderThan time.Duration
		keepCache, asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Remove soft-deleted documents and unused cached embeddings past their retention",
		Long: `purge removes the index's soft-deleted documents (op=d, truncate) deleted
longer than --older-than ago, with their chunks, and then the embedding cache
entries of the index's model not used for longer than --cache-older-than that
no chunk points at. Cached embeddings of purged documents stay until the cache
retention, so re-creating a document soon after costs nothing. A purged
document loses its version fence: a change older than its delete arriving
after the retention would create it again. serve runs the same purge
periodically (purge.interval).

Example:
  ragsync purge --config ragsync.yaml --older-than 720h
  ragsync purge --older-than 24h --keep-cache --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			opts, err := cfg.Purge.Options()
			if err = errors.Join(err, cfg.Validate(false)); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			if olderThan < 0 || cacheOlderThan < 0 {
				return errors.New("--older-than and --cache-older-than must not be negative")
			}
			// On the command line 0 means "up to now", not the default.
			if cmd.Flags().Changed("older-than") {
				opts.DocumentRetention = max(olderThan, sink.RetainNothing)
			}
			if cmd.Flags().Changed("cache-older-than") {
				opts.CacheRetention = max(cacheOlderThan, sink.RetainNothing)
			}
			opts.KeepCache = keepCache
			opts = opts.WithDefaults()
			ctx := cmd.Context()
			ix, err := openIndex(ctx, cfg, newLogger(cmd.ErrOrStderr(), LogConfig{Level: "warn"}, false), nil)
			if err != nil {
				return err
			}
			defer ix.Close()
			st := ix.Store
			res, err := st.Purge(ctx, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			docsKept, cacheKept := opts.Retentions()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"documents": res.Documents, "chunks": res.Chunks, "cache_entries": res.CacheEntries,
					"document_retention": docsKept, "cache_retention": cacheKept})
			}
			cacheWhat := "cache entries unused for " + cacheKept
			if opts.KeepCache {
				cacheWhat = "cache kept (--keep-cache)"
			}
			_, err = fmt.Fprintf(out, "purged %d documents (%d chunks) and %d cache entries from index %s (documents deleted more than %s ago, %s)\n",
				res.Documents, res.Chunks, res.CacheEntries, cfg.Index, docsKept, cacheWhat)
			return err
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", sink.DefaultDocumentRetention, "remove documents deleted longer ago than this; 0s: every deleted document (default purge.document_retention)")
	cmd.Flags().DurationVar(&cacheOlderThan, "cache-older-than", sink.DefaultCacheRetention, "remove cache entries unused for longer than this; 0s: every unused entry (default purge.cache_retention)")
	cmd.Flags().BoolVar(&keepCache, "keep-cache", false, "leave the embedding cache alone")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts as JSON")
	return cmd
}
