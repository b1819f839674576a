package monitor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// String is the one line that says whose canary baselines the checks
// compare with, and how to take the missing ones.
func (b Baselines) String() string {
	if b.Probes == 0 {
		return fmt.Sprintf("canary baselines: none of %d probes (serve takes them at its first check; ragsync monitor baseline takes them now)", b.Missing)
	}
	s := fmt.Sprintf("canary baselines: %d probes, taken by %s, newest %s", b.Probes, strings.Join(b.TakenBy, ", "), b.TakenAt.UTC().Format(time.RFC3339))
	if b.Missing > 0 {
		s += fmt.Sprintf("; %d probes have none (ragsync monitor baseline takes them)", b.Missing)
	}
	return s
}

// Write prints the status for a person (a header line, a table of the
// signals, the canary baselines, the reuse debt and the fidelity sample),
// or as one JSON object.
func (st Status) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(st)
	}
	state := "healthy"
	if st.Breach {
		state = "ALARM"
	}
	model, version := "", ""
	if len(st.Events) > 0 {
		model, version = st.Events[0].Model, st.Events[0].ModelVersion
	}
	fmt.Fprintf(w, "%s  %s  model %s", st.Time.UTC().Format(time.RFC3339), state, model)
	if version != "" && version != model {
		fmt.Fprintf(w, " (provider reports %s)", version)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tMETHOD\tSCORE\tTHRESHOLD\tSTATE")
	for _, e := range st.Events {
		s := "ok"
		if e.Signal.Exceeded {
			s = "EXCEEDED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%.4g\t%s\n", e.SemanticTag, e.Signal.Method, e.Signal.Score, e.Signal.Threshold, s)
	}
	if !st.Drift.Ready {
		fmt.Fprintf(tw, "drift\t(windows filling: reference %d, current %d)\t\t\t\n", st.Drift.RefN, st.Drift.CurN)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range st.Events {
		if s := e.Signal.Storage; s != nil {
			fmt.Fprintf(w, "%s %s\n", e.Signal.Method, s)
		}
	}
	fmt.Fprintln(w, st.Baselines.String())
	if b := st.Budget; b != nil {
		fmt.Fprintln(w, b.String())
	}
	if l := st.Lag; l != nil && l.CappedBy != "" {
		fmt.Fprintf(w, "recommended replicas: %d, not the %d the lag asks for: %s\n", l.Recommended, l.Uncapped, l.CappedBy)
	}
	if d := st.Debt; d != nil {
		repaid := "n/a outside serve"
		if d.RepaidTokens >= 0 {
			repaid = fmt.Sprintf("%.0f tokens", d.RepaidTokens)
		}
		fmt.Fprintf(w, "reuse debt: %d vectors (~%d tokens to repay), oldest %.0fs (window %.0fs), repaid so far %s\n",
			d.Vectors, d.Tokens, d.OldestAgeSeconds, d.WindowSeconds, repaid)
	}
	if st.Sample != nil {
		fmt.Fprintln(w, st.Sample.String())
	}
	for _, e := range st.Events {
		if sp := e.SampleProvenance; sp != nil {
			fmt.Fprintln(w, sp.String())
		}
	}
	if len(st.Fidelity) > 0 {
		return WriteAggregates(w, st.Fidelity)
	}
	return nil
}

// String is the one line that says what wrote the measured chunks, e.g.
// "sampled chunks: model version embed-1-2026 ×30, unknown ×2; chunker
// content-defined/512/128/1024 ×32" (unknown: written before provenance
// was recorded).
func (sp SampleProvenance) String() string {
	list := func(cs []ProvenanceCount) string {
		parts := make([]string, len(cs))
		for i, c := range cs {
			v := "unknown"
			if c.Value != nil {
				v = *c.Value
			}
			parts[i] = fmt.Sprintf("%s ×%d", v, c.Chunks)
		}
		return strings.Join(parts, ", ")
	}
	return "sampled chunks: model version " + list(sp.ModelVersions) + "; chunker " + list(sp.Chunkers)
}

// WriteAggregates prints the fidelity sample's aggregates as a table.
func WriteAggregates(w io.Writer, aggs []Aggregate) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tN\tP50 COSINE\tP99 COSINE\tMAX\tOVER BOUND\tOVER L2 BOUND")
	for _, a := range aggs {
		fmt.Fprintf(tw, "%s\t%d\t%.4g\t%.4g\t%.4g\t%.1f%%\t%.1f%%\n", a.Kind, a.N, a.P50, a.P99, a.Max, 100*a.ShareOver, 100*a.ShareOverL2)
	}
	return tw.Flush()
}
