package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/sink"
)

// runAfter measures reading one's own writes through `ragsync serve` on
// the Postgres source: tries changes are committed at rate, each followed
// at once by `SELECT pg_current_wal_lsn()` on the same connection (the
// position an application would take), and a reader in this process
// waits for the index's watermark to pass it (sink.Store.WaitAfter, what
// `ragsync query --after` does) and then searches for the change's text.
// It reports how many answers held the change, their latency from the
// commit against serve's freshness p99 in the same window, and the
// watermark's age, sampled from the index schema's watermark view.
func runAfter(ctx context.Context, o options, rate float64, tries int) error {
	sv, err := startServe(ctx, o, "{{body}}")
	if err != nil {
		return err
	}
	defer sv.stop()
	pool, err := pgxpool.New(ctx, o.url+poolSep(o.url)+"pool_max_conns=64")
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := sink.OpenIndex(ctx, pool, sink.Config{Mode: sink.Read, Schema: sv.schema, Index: "bench", Model: "text-embedding-3-small", Dimensions: o.dims})
	if err != nil {
		return fmt.Errorf("open the index read-only: %w\nserve's output:\n%s", err, sv.log())
	}
	conn, err := pgx.Connect(ctx, o.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	warm := int(rate * o.warmup.Seconds())
	total := warm + tries
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("read your writes probe ryw%06d %s", i, strings.TrimSpace(text(80)))
		bodies[i] = strings.Join(strings.Fields(bodies[i]), " ")
	}
	vecs, err := embedder.NewHashing(o.dims).Embed(ctx, bodies)
	if err != nil {
		return err
	}
	upsert := "INSERT INTO " + sv.slot + ".articles (id, body) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = excluded.body"

	type outcome struct {
		latency time.Duration
		found   bool
		notYet  bool
		err     error
	}
	out := make([]outcome, total)
	var wg sync.WaitGroup
	var ages []float64
	var agesMu sync.Mutex
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	var before map[float64]float64
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for i := range total {
		if i == warm {
			if before, err = freshnessBuckets(sv.base); err != nil {
				return err
			}
			go func() {
				defer close(sampled)
				q := "SELECT extract(epoch FROM now() - through_at)::float8 FROM " + pgx.Identifier{sv.schema}.Sanitize() + ".watermark WHERE index_name = 'bench'"
				t := time.NewTicker(20 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-sampling.Done():
						return
					case <-t.C:
					}
					var age float64
					if err := pool.QueryRow(sampling, q).Scan(&age); err == nil {
						agesMu.Lock()
						ages = append(ages, age)
						agesMu.Unlock()
					}
				}
			}()
		}
		if _, err := conn.Exec(ctx, upsert, i%o.docs, bodies[i]); err != nil {
			return err
		}
		committed := time.Now()
		var lsn string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := cdc.ParseAfter(lsn)
			if err == nil {
				err = st.WaitAfter(ctx, a, 10*time.Second)
			}
			if errors.Is(err, sink.ErrNotYet) {
				out[i] = outcome{notYet: true, latency: time.Since(committed)}
				return
			}
			if err != nil {
				out[i] = outcome{err: err}
				return
			}
			hits, err := st.Search(ctx, vecs[i], sink.Query{K: 3})
			lat := time.Since(committed)
			found := false
			for _, h := range hits {
				found = found || strings.Contains(h.Text, fmt.Sprintf("ryw%06d", i))
			}
			out[i] = outcome{latency: lat, found: found, err: err}
		}()
		next = next.Add(interval)
		time.Sleep(time.Until(next))
	}
	wg.Wait()
	stopSampling()
	<-sampled
	time.Sleep(time.Second)
	after, err := freshnessBuckets(sv.base)
	if err != nil {
		return err
	}
	les := make([]float64, 0, len(after))
	for le := range after {
		les = append(les, le)
	}
	slices.Sort(les)
	counts := make([]float64, len(les))
	for i, le := range les {
		counts[i] = after[le] - before[le]
	}
	freshP99 := time.Duration(histogramQuantile(0.99, les, counts) * float64(time.Second))
	freshP50 := time.Duration(histogramQuantile(0.50, les, counts) * float64(time.Second))

	var lats []time.Duration
	found, notYet, failed := 0, 0, 0
	for _, r := range out[warm:] {
		switch {
		case r.err != nil:
			failed++
			if failed == 1 {
				warnf("a try failed: %v", r.err)
			}
		case r.notYet:
			notYet++
		default:
			if r.found {
				found++
			}
			lats = append(lats, r.latency)
		}
	}
	slices.Sort(lats)
	q := func(s []time.Duration, f float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, int(f*float64(len(s))))]
	}
	slices.Sort(ages)
	qa := func(f float64) time.Duration {
		if len(ages) == 0 {
			return 0
		}
		return time.Duration(ages[min(len(ages)-1, int(f*float64(len(ages))))] * float64(time.Second))
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
	fmt.Printf("read your writes through `ragsync serve` (%s) on the Postgres source, %g changes/s, provider latency %s, %d tries after %d warm-up changes; each try commits a change, takes pg_current_wal_lsn() and waits for the watermark (sink.Store.WaitAfter, as query --after does), then searches for the change\n", o.bin, rate, o.latency, tries, warm)
	fmt.Println("| figure | value | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| answers that held the change | %d of %d (%.1f%%); not yet %d, failed %d | 100%% |\n", found, tries, 100*float64(found)/float64(tries), notYet, failed)
	fmt.Printf("| latency commit → answer, p50 / p99 / max | %s / %s / %s | p99 ≤ freshness p99 + 50 ms = %s |\n", ms(q(lats, 0.5)), ms(q(lats, 0.99)), ms(q(lats, 1)), ms(freshP99+50*time.Millisecond))
	fmt.Printf("| freshness (serve's histogram, same window) p50 / p99 | %s / %s | |\n", ms(freshP50), ms(freshP99))
	fmt.Printf("| watermark age (view, every 20 ms; %d samples) p50 / p99 | %s / %s | p99 ≤ freshness p99 + 100 ms = %s |\n", len(ages), ms(qa(0.5)), ms(qa(0.99)), ms(freshP99+100*time.Millisecond))
	if found != tries {
		return fmt.Errorf("%d of %d answers lacked their change", tries-found, tries)
	}
	return nil
}

func poolSep(url string) string {
	if strings.Contains(url, "?") {
		return "&"
	}
	return "?"
}
