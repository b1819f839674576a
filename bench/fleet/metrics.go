package main

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragsync/ragsync/internal/openaitest"
)

// scrape is the sum over the replicas of what the bench reads from their
// /metrics: the freshness histogram's cumulative buckets by upper bound,
// and the changes by outcome.
type scrape struct {
	fresh   map[float64]float64
	changes map[string]float64 // outcome → count
	// wait and admitted are the provider budget's seconds waited and
	// requests admitted, by lane.
	wait, admitted map[string]float64
}

func scrapeAll(reps []*proc) (scrape, error) {
	s := scrape{fresh: map[float64]float64{}, changes: map[string]float64{}, wait: map[string]float64{}, admitted: map[string]float64{}}
	for _, p := range reps {
		if err := s.add(p.base); err != nil {
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return s, nil
}

func (s scrape) add(base string) error {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "ragsync_pipeline_freshness_seconds_bucket{"):
			le, err := strconv.ParseFloat(label(line, "le"), 64)
			if err != nil {
				return fmt.Errorf("parse metrics line %q", line)
			}
			s.fresh[le] += n
		case strings.HasPrefix(line, "ragsync_pipeline_changes_total{"):
			s.changes[label(line, "outcome")] += n
		case strings.HasPrefix(line, "ragsync_embedder_budget_wait_seconds_total{"):
			s.wait[label(line, "lane")] += n
		case strings.HasPrefix(line, "ragsync_embedder_budget_requests_total{"):
			s.admitted[label(line, "lane")] += n
		}
	}
	return sc.Err()
}

// label is the value of label k in a text-format sample line.
func label(line, k string) string {
	_, rest, ok := strings.Cut(line, k+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// laneWait is the live lane's mean wait for the budget per request
// admitted between a and b.
func laneWait(a, b scrape, lane string) time.Duration {
	n := b.admitted[lane] - a.admitted[lane]
	if n <= 0 {
		return 0
	}
	return time.Duration((b.wait[lane] - a.wait[lane]) / n * float64(time.Second))
}

// p99 is the 0.99 quantile of the freshness observed between a and b, in
// seconds, interpolated within buckets as Prometheus' histogram_quantile;
// n is how many changes it covers.
func p99(a, b scrape) (q float64, n float64) {
	les := make([]float64, 0, len(b.fresh))
	for le := range b.fresh {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 {
		return 0, 0
	}
	counts := make([]float64, len(les))
	for i, le := range les {
		counts[i] = b.fresh[le] - a.fresh[le]
	}
	total := counts[len(counts)-1]
	if total <= 0 {
		return 0, 0
	}
	rank := 0.99 * total
	i := 0
	for i < len(counts)-1 && counts[i] < rank {
		i++
	}
	if math.IsInf(les[i], 1) {
		return les[len(les)-2], total
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = les[i-1], counts[i-1]
	}
	in := counts[i] - below
	if in <= 0 {
		return les[i], total
	}
	return lower + (les[i]-lower)*(rank-below)/in, total
}

// admitted summarises the fake's admissions in [from, to).
type admitted struct {
	accepted, throttled int
	tokens              int // of the accepted
	seconds             float64
}

func admissions(adm []openaitest.Admission, from, to time.Time) admitted {
	a := admitted{seconds: to.Sub(from).Seconds()}
	for _, x := range adm {
		if x.At.Before(from) || !x.At.Before(to) {
			continue
		}
		if x.Throttled {
			a.throttled++
			continue
		}
		a.accepted++
		a.tokens += x.Tokens
	}
	return a
}

// perMinute is the accepted requests' rate.
func (a admitted) perMinute() float64 { return float64(a.accepted) / a.seconds * 60 }

// tokensPerMinute is the accepted tokens' rate.
func (a admitted) tokensPerMinute() float64 { return float64(a.tokens) / a.seconds * 60 }

// throttledShare is 429s over every request judged.
func (a admitted) throttledShare() float64 {
	if a.accepted+a.throttled == 0 {
		return 0
	}
	return float64(a.throttled) / float64(a.accepted+a.throttled)
}
