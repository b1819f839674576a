package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/sink"
)

// runMetadata measures, through src at each rate, the freshness of text
// edits and then of metadata-only updates, each in a leg of its own with
// the same settings (rows rendered by metadataTables):
//
//   - text edits: run's measurement (commit → the sink's commit);
//   - metadata: every document is first created (its text, no status) and
//     indexed; then each change sets the status of a random document to a
//     value no change used before, its text unchanged. Timed to the sink's
//     commit, like the text edits, and to the new value being filterable:
//     a probe polls the index's view (what SQL users and the metadata
//     filters of query and the front door read) for
//     metadata @> {"semantic_tag": <value>} on that document.
func runMetadata(ctx context.Context, o options, src string) error {
	switch src {
	case "kafka":
		fmt.Printf("freshness of text edits and of metadata-only updates through Kafka (kfake) into the pipeline in this process, provider latency %s, 1.5-4 KB documents over %d documents, %d partitions; exact quantiles; filterable: polled every %s\n",
			o.latency, o.docs, o.partitions, o.probeEvery)
	case "postgres-pipeline":
		fmt.Printf("freshness of text edits and of metadata-only updates through the Postgres source (a replication slot, one transaction per change) into the pipeline in this process, provider latency %s, 1.5-4 KB documents over %d documents; exact quantiles; filterable: polled every %s, from the return of the change's commit\n",
			o.latency, o.docs, o.probeEvery)
	}
	fmt.Println("| change | changes/s | p50 | p95 | p99 | applied/s | applied/offered | chunk rows/s | metadata-only writes | filterable p50 | filterable p95 | filterable p99 | filterable/committed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, rate := range o.rates {
		text, err := run(ctx, o, src, rate, 0)
		if err != nil {
			return fmt.Errorf("text edits at %g/s: %w", rate, err)
		}
		fmt.Println(text.metadataRow("text edit"))
		md, err := runMetadataLeg(ctx, o, src, rate)
		if err != nil {
			return fmt.Errorf("metadata-only updates at %g/s: %w", rate, err)
		}
		fmt.Println(md.metadataRow("metadata only"))
	}
	return nil
}

// metadataRow is r as a row of runMetadata's table.
func (r result) metadataRow(kind string) string {
	chunks := "—"
	if r.chunks > 0 || kind != "text edit" {
		chunks = fmt.Sprintf("%.0f", r.chunks)
	}
	filterable := "— | — | — | —"
	if r.committed > 0 {
		filterable = fmt.Sprintf("%d ms | %d ms | %d ms | %d/%d", r.f50.Milliseconds(), r.f95.Milliseconds(), r.f99.Milliseconds(), r.filterable, r.committed)
	}
	return fmt.Sprintf("| %s | %g | %d ms | %d ms | %d ms | %.1f | %.2f | %s | %d | %s |", kind, r.rate, r.p50.Milliseconds(), r.p95.Milliseconds(), r.p99.Milliseconds(),
		r.applied, r.applied/r.rate, chunks, r.metadataOnly, filterable)
}

// runMetadataLeg is the metadata leg of runMetadata at rate.
func runMetadataLeg(ctx context.Context, o options, leg string, rate float64) (result, error) {
	res := result{rate: rate}
	b, closing, err := setUp(ctx, o, leg)
	if err != nil {
		return res, err
	}
	defer closing()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	var ranErr error
	go func() { ranErr = b.p.Run(runCtx); close(done) }()
	halt := func() error {
		stop()
		<-done
		return ranErr
	}
	defer halt()

	// Every document exists and is indexed before its status changes: a
	// status change is then an update whose text is unchanged.
	for id := range o.docs {
		if err := b.commit(ctx, id, text(1500+mrand.IntN(2500)), time.Now()); err != nil {
			return res, err
		}
	}
	if err := b.flush(ctx); err != nil {
		return res, err
	}
	pr := &probe{b: b, view: pgx.Identifier{b.schema, sink.IndexView("bench")}.Sanitize()}
	if err := pr.waitIndexed(ctx, o.docs, done); err != nil {
		return res, err
	}

	probeCtx, stopProbe := context.WithCancel(ctx)
	probed := make(chan error, 1)
	go func() { probed <- pr.run(probeCtx, o.probeEvery) }()
	seq := 0
	var from time.Time
	_, err = drive(ctx, o, rate, func(ctx context.Context, id int, _ string, now time.Time) error {
		seq++
		tag := fmt.Sprintf("v%d", seq)
		at, err := b.setStatus(ctx, id, tag, now)
		if err != nil {
			return err
		}
		if !at.Before(from) {
			pr.add(sink.DocID(b.table, fmt.Sprint(id)), tag, at)
		}
		return nil
	}, func(f time.Time) {
		from = f
		b.ts.mu.Lock()
		b.ts.from = f
		b.ts.mu.Unlock()
	})
	if err == nil {
		err = b.flush(ctx)
	}
	if err != nil {
		stopProbe()
		<-probed
		return res, err
	}
	// Let the last changes land, then stop.
	time.Sleep(2 * time.Second)
	stopProbe()
	if err := <-probed; err != nil {
		return res, fmt.Errorf("probe: %w", err)
	}
	if err := halt(); err != nil {
		return res, err
	}

	b.ts.mu.Lock()
	lat := slices.Clone(b.ts.lat)
	res.chunks = float64(b.ts.inserted) / o.duration.Seconds()
	res.metadataOnly = b.ts.metadataOnly
	b.ts.mu.Unlock()
	if len(lat) == 0 {
		return res, fmt.Errorf("nothing applied in the measured window")
	}
	res.p50, res.p95, res.p99 = quantiles(lat)
	res.applied = float64(len(lat)) / o.duration.Seconds()
	seen, committed := pr.results()
	res.committed, res.filterable = committed, len(seen)
	if len(seen) == 0 {
		return res, fmt.Errorf("no change became filterable")
	}
	res.f50, res.f95, res.f99 = quantiles(seen)
	return res, nil
}

// probe finds when each status change becomes filterable: it polls the
// index's view for the changes not yet seen, all in one query, and takes
// a change as filterable at the start of the first poll that finds it (a
// statement sees what was committed when it started), so each time is
// late by at most one interval.
type probe struct {
	b    *bench
	view string

	mu      sync.Mutex
	pending []*probeChange
	// committed counts the changes added; overtaken, those a later change
	// of their document made unfilterable before a poll found them.
	committed, overtaken int
	seen                 []time.Duration
}

type probeChange struct {
	doc, tag string
	at       time.Time
}

func (p *probe) add(doc, tag string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, &probeChange{doc: doc, tag: tag, at: at})
	p.committed++
}

// results returns the times to filterable of the changes found, and how
// many changes could have been: those committed, less those overtaken.
func (p *probe) results() ([]time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen), p.committed - p.overtaken
}

// run polls every interval until ctx ends, then once more.
func (p *probe) run(ctx context.Context, every time.Duration) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return p.poll(context.WithoutCancel(ctx))
		case <-tick.C:
		}
		if err := p.poll(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

func (p *probe) poll(ctx context.Context) error {
	p.mu.Lock()
	pending := slices.Clone(p.pending)
	p.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	docs, tags := make([]string, len(pending)), make([]string, len(pending))
	for i, c := range pending {
		docs[i], tags[i] = c.doc, c.tag
	}
	start := time.Now()
	rows, err := p.b.pool.Query(ctx, "SELECT p.i FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS p(doc, tag, i)"+
		" WHERE EXISTS (SELECT 1 FROM "+p.view+" v WHERE v.doc_id = p.doc AND v.metadata @> jsonb_build_object('semantic_tag', p.tag))", docs, tags)
	if err != nil {
		return err
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	hit := map[*probeChange]bool{}
	latest := map[string]time.Time{} // per document, the latest change found
	for _, i := range found {
		c := pending[i-1]
		hit[c] = true
		if c.at.After(latest[c.doc]) {
			latest[c.doc] = c.at
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = slices.DeleteFunc(p.pending, func(c *probeChange) bool {
		switch {
		case hit[c]:
			p.seen = append(p.seen, start.Sub(c.at))
			return true
		case !latest[c.doc].IsZero() && c.at.Before(latest[c.doc]):
			// A later change of the document is filterable: this one
			// can no longer be.
			p.overtaken++
			return true
		}
		return false
	})
	return nil
}

// waitIndexed waits until docs documents are in the index's view (the
// pipeline stopping, or three minutes, fail it).
func (p *probe) waitIndexed(ctx context.Context, docs int, stopped <-chan struct{}) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int
		if err := p.b.pool.QueryRow(ctx, "SELECT count(DISTINCT doc_id) FROM "+p.view).Scan(&n); err != nil {
			return err
		}
		if n >= docs {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d documents indexed after three minutes", n, docs)
		}
		select {
		case <-stopped:
			return fmt.Errorf("the pipeline stopped with %d of %d documents indexed", n, docs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
