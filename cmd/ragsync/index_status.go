package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// chunkGroupInfo is one line of the chunks by provenance: how many chunk
// rows one model version and one chunker wrote. null in JSON is unknown
// (written before either was recorded).
type chunkGroupInfo struct {
	ModelVersion *string `json:"model_version"`
	Chunker      *string `json:"chunker"`
	Chunks       int64   `json:"chunks"`
}

func (g chunkGroupInfo) modelVersion() string { return orUnknown(g.ModelVersion) }
func (g chunkGroupInfo) chunker() string      { return orUnknown(g.Chunker) }

func orUnknown(s *string) string {
	if s == nil {
		return "unknown"
	}
	return *s
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func chunkGroupInfos(groups []sink.ChunkGroup) []chunkGroupInfo {
	out := make([]chunkGroupInfo, len(groups))
	for i, g := range groups {
		out[i] = chunkGroupInfo{ModelVersion: nilIfEmpty(g.ModelVersion), Chunker: nilIfEmpty(g.Chunker), Chunks: g.Chunks}
	}
	return out
}

// chunkGroupsByIndex splits the chunk groups of every index by index.
func chunkGroupsByIndex(groups []sink.ChunkGroup) map[string][]chunkGroupInfo {
	out := map[string][]chunkGroupInfo{}
	for i, g := range groups {
		out[g.Index] = append(out[g.Index], chunkGroupInfos(groups[i : i+1])[0])
	}
	return out
}

// printChunkGroups prints the chunks by provenance of the listed indexes
// that hold any.
func printChunkGroups(out io.Writer, infos []indexInfo) error {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	header := false
	for _, x := range infos {
		for _, g := range x.ChunkGroups {
			if !header {
				fmt.Fprintln(out)
				fmt.Fprintln(out, "CHUNKS BY PROVENANCE")
				fmt.Fprintln(tw, "INDEX\tMODEL VERSION\tCHUNKER\tCHUNKS")
				header = true
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", x.Name, g.modelVersion(), g.chunker(), g.Chunks)
		}
	}
	return tw.Flush()
}

// leftover is one line of what an index has left to do: how many, what,
// and the command that finishes it.
type leftover struct {
	Count int64  `json:"count"`
	What  string `json:"what"`
	Fix   string `json:"fix"`
}

// indexStatus is ragsync index status's report.
type indexStatus struct {
	Index      string `json:"index"`
	Alias      string `json:"alias,omitempty"`
	Model      string `json:"model"`
	Dimensions int    `json:"dimensions"`
	// Type, HNSW and RerankCandidates are as in index list.
	Type             string           `json:"type"`
	HNSW             hnswInfo         `json:"hnsw"`
	RerankCandidates int              `json:"rerank_candidates"`
	Chunker          *string          `json:"chunker"`
	ChunkGroups      []chunkGroupInfo `json:"chunk_groups"`
	Leftovers        sink.Leftovers   `json:"-"`
	Left             []leftover       `json:"left"`
	// Watermarks is the index's watermark per source (see
	// sourceWatermark); empty before any change was acknowledged.
	Watermarks []sourceWatermark `json:"watermarks"`
}

// leftovers turns the counts into what is left to do, each with the
// command that finishes it; none when the index is uniform.
func leftovers(l sink.Leftovers, index string) []leftover {
	recut := fmt.Sprintf("each is re-cut when its document next changes; to re-cut every document now: ragsync reindex --to %s_next, then ragsync index promote %s_next (vectors of unchanged chunk texts come from the embedding cache)", index, index)
	var out []leftover
	if l.OtherChunker > 0 {
		out = append(out, leftover{l.OtherChunker, fmt.Sprintf("chunks cut with other chunker settings than the index's (%s)", l.Chunker), recut})
	}
	if l.UnknownChunker > 0 {
		out = append(out, leftover{l.UnknownChunker, "chunks cut with unknown chunker settings (written before the settings were recorded)", recut})
	}
	reembed := "a re-cut keeps their vectors (the embedding cache holds them); ragsync fidelity check --sample N measures whether the stored vectors still match the model, and ragsync repair re-embeds those past monitor.cosine_bound"
	if l.UnknownModelVersion > 0 {
		out = append(out, leftover{l.UnknownModelVersion, "chunks embedded by an unknown model version (written before versions were recorded, or by a provider that reports none)", reembed})
	}
	if l.OldModelVersion > 0 {
		out = append(out, leftover{l.OldModelVersion, fmt.Sprintf("chunks embedded by another model version than the newest seen (%s)", l.ModelVersion), reembed})
	}
	if l.NoRenderHash > 0 {
		out = append(out, leftover{l.NoRenderHash, "documents without a render hash (written before render hashes were recorded)",
			"nothing to run: the next update of each re-cuts it once even when its text did not change (its unchanged chunks keep their vectors), and records the hash; ragsync reindex --to NEW writes every one now"})
	}
	return out
}

func newIndexStatusCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show an index's watermark and what a change of chunker settings or model version has left to re-cut or re-embed",
		Long: `status shows index NAME (an index or an alias; default: the configured index:):
its vector type and HNSW parameters (a bit index's re-ranked candidates too),
the chunker settings it records (those its writers last started with), the
chunks of its live documents by model version and chunker settings, and
what is left to do, each with the command that finishes it:

  - chunks cut with other chunker settings than the recorded ones, or with
    unknown settings (written before the settings were recorded);
  - chunks embedded by an unknown model version (written before versions
    were recorded, or by a provider that reports none), or by another model
    version than the newest seen, when the chunks carry several (the newest
    is the one the provider reported for the newest embedding-cache entry);
  - documents without a render hash (written before it was recorded): the
    next update of each re-cuts it once, even when its text is unchanged.

It only reads: a role with SELECT on the schema can run it. It reads every
chunk of the index once (index list and the ragsync_index_chunks metric
count the chunk rows of deleted documents too, until ragsync purge).

It also shows the index's watermark, per source: the kind of position
(lsn, offset, line, entry), how many lanes (Kafka partitions, Redis
streams), the position when there is one lane (--json lists every lane),
the time through which every committed change is searchable, how old that
time is, and whether every lane was caught up. query --after waits on it.`,
		Example: `  ragsync index status --config ragsync.yaml [--json]
  ragsync index status articles_v2 --config ragsync.yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.loadValid(false)
			if err != nil {
				return err
			}
			name := cfg.Index
			if len(args) == 1 {
				name = args[0]
			}
			ctx := cmd.Context()
			pool, cat, err := service.OpenCatalogRead(ctx, cfg.Postgres.URL, cfg.Postgres.Schema)
			if err != nil {
				return err
			}
			defer pool.Close()
			r, err := cat.Lookup(ctx, name)
			if err != nil {
				return err
			}
			l, err := cat.Leftovers(ctx, r.Index.Name)
			if err != nil {
				return err
			}
			st := indexStatus{Index: r.Index.Name, Model: r.Index.Model, Dimensions: r.Index.Dimensions, Chunker: nilIfEmpty(l.Chunker),
				ChunkGroups: chunkGroupInfos(l.Groups), Leftovers: l, Left: leftovers(l, r.Index.Name)}
			h := r.Index.HNSW.WithDefaults()
			st.Type, st.HNSW, st.RerankCandidates = vectorTypeOf(r.Index.Type), hnswInfo{M: h.M, EfConstruction: h.EfConstruction, EfSearch: h.EfSearch}, r.Index.Candidates
			if r.Alias != nil {
				st.Alias = name
			}
			if st.Left == nil {
				st.Left = []leftover{}
			}
			store, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: cfg.Postgres.Schema, Index: r.Index.Name, Physical: true})
			if err != nil {
				return err
			}
			marks, err := store.Watermarks(ctx)
			if err != nil {
				return err
			}
			st.Watermarks = sourceWatermarks(marks, time.Now())
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(st)
			}
			return printIndexStatus(out, st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as one JSON object")
	return cmd
}

func printIndexStatus(out io.Writer, st indexStatus) error {
	fmt.Fprintf(out, "index %s", st.Index)
	if st.Alias != "" {
		fmt.Fprintf(out, " (alias %s)", st.Alias)
	}
	fmt.Fprintf(out, ": model %s, %d dimensions, chunker %s\n", st.Model, st.Dimensions, orUnknown(st.Chunker))
	fmt.Fprintf(out, "type %s, HNSW m %d, ef_construction %d, ef_search %d", st.Type, st.HNSW.M, st.HNSW.EfConstruction, st.HNSW.EfSearch)
	if st.Type == string(sink.TypeBit) {
		if st.RerankCandidates > 0 {
			fmt.Fprintf(out, ", %d candidates re-ranked on the full vectors", st.RerankCandidates)
		} else {
			fmt.Fprint(out, ", the default candidates re-ranked on the full vectors")
		}
	}
	fmt.Fprintln(out)
	if len(st.ChunkGroups) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MODEL VERSION\tCHUNKER\tCHUNKS")
		for _, g := range st.ChunkGroups {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", g.modelVersion(), g.chunker(), g.Chunks)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := printWatermarks(out, st.Watermarks); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if len(st.Left) == 0 {
		_, err := fmt.Fprintln(out, "nothing left: every chunk was cut with the recorded chunker settings and embedded by one known model version, and every document records its render hash")
		return err
	}
	fmt.Fprintln(out, "left to do:")
	for _, l := range st.Left {
		fmt.Fprintf(out, "  %d %s\n      %s\n", l.Count, l.What, l.Fix)
	}
	return nil
}
