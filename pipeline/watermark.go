package pipeline

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
)

// markInterval is how often the source's marks are read while nothing is
// acknowledged: an idle source's marks move too (a Postgres slot's server
// position, a caught-up partition's time), and a reader waiting for a
// position past the last change waits at most about this long for them.
const markInterval = 100 * time.Millisecond

// watermark writes the source's marks (cdc.Watermarker) to every target
// after each acknowledgement and every markInterval, when they moved. A
// source that keeps no marks (a backfill) writes none.
type watermark struct {
	src cdc.Watermarker
	// dirty is signalled after acknowledgements.
	dirty chan struct{}
	// mu serialises saves (the acknowledging goroutine and the ticker).
	mu sync.Mutex
	// saved are the marks last written to every target, by source and
	// lane; failed says the last save failed (warned once until it works).
	saved  map[string]cdc.Mark
	failed bool
	// shown are the marks for the age gauge.
	shownMu sync.Mutex
	shown   []cdc.Mark
}

func markKey(m cdc.Mark) string { return m.Source + "\x00" + m.Lane }

// saveMarks reads the source's marks and writes those that moved to the
// primary index and every shadow. It runs after the sink committed what
// the source acknowledged, so a mark never claims a change a search
// cannot see. A failure is logged, not fatal: the watermark then lags
// (its age shows it) and readers waiting on it wait, but no change is
// lost; the next acknowledgement or tick writes it again.
func (p *Pipeline) saveMarks(ctx context.Context) {
	w := p.marks
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	marks, err := w.src.Marks(ctx)
	if err == nil && len(marks) > 0 {
		var moved []cdc.Mark
		for _, m := range marks {
			if old, ok := w.saved[markKey(m)]; !ok || !old.Same(m) {
				moved = append(moved, m)
			}
		}
		if len(moved) == 0 {
			return
		}
		p.shadowMu.RLock()
		targets := append([]Target{p.st.Target}, p.shadows...)
		p.shadowMu.RUnlock()
		for _, t := range targets {
			if err = t.Index.SaveMarks(ctx, moved); err != nil {
				break
			}
		}
		if err == nil {
			for _, m := range moved {
				w.saved[markKey(m)] = m
			}
			w.shownMu.Lock()
			w.shown = w.shown[:0]
			for _, m := range w.saved {
				w.shown = append(w.shown, m)
			}
			w.shownMu.Unlock()
		}
	}
	if err != nil && ctx.Err() == nil {
		if !w.failed {
			p.log.WarnContext(ctx, "could not write the watermark; readers waiting for a position wait until it is written (retried at the next acknowledgement)", "error", err)
		}
		w.failed = true
		return
	}
	if err == nil && w.failed {
		w.failed = false
		p.log.InfoContext(ctx, "watermark written again")
	}
}

// tickMarks saves the marks after acknowledgements and every
// markInterval until stop is closed. It runs beside the acknowledgements
// rather than in their path, so a watermark write never holds up an
// acknowledgement, and acknowledgements that come while a write is in
// flight are covered by one more write.
func (p *Pipeline) tickMarks(ctx context.Context, stop <-chan struct{}) {
	if p.marks == nil {
		return
	}
	t := time.NewTicker(markInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.marks.dirty:
		}
		p.saveMarks(ctx)
	}
}

// Marks returns the marks last written, for status output.
func (p *Pipeline) Marks() []cdc.Mark {
	if p.marks == nil {
		return nil
	}
	p.marks.shownMu.Lock()
	defer p.marks.shownMu.Unlock()
	return append([]cdc.Mark(nil), p.marks.shown...)
}

// watermarkCollector exports the age of every lane's time watermark.
type watermarkCollector struct {
	p     *Pipeline
	index string
	desc  *prometheus.Desc
	pos   *prometheus.Desc
}

func newWatermarkCollector(p *Pipeline, index string) *watermarkCollector {
	return &watermarkCollector{p: p, index: index, desc: prometheus.NewDesc("ragsync_watermark_age_seconds",
		"Seconds since the time watermark of each lane (every change committed at or before it is searchable), by index, source and lane; it grows while a lane's changes wait, and stays small while it is caught up.",
		[]string{"index", "source", "lane"}, nil),
		pos: prometheus.NewDesc("ragsync_watermark_position",
			"Each lane's watermark position as a number (an LSN, a Kafka offset, a line; a Redis entry id's milliseconds × 2^64 + its sequence), by index, source and lane: every change at or before it is searchable.",
			[]string{"index", "source", "lane"}, nil)}
}

func (c *watermarkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.pos }

func (c *watermarkCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.p.now()
	for _, m := range c.p.Marks() {
		if m.Ord != nil {
			pos, _ := new(big.Float).SetInt(m.Ord).Float64()
			ch <- prometheus.MustNewConstMetric(c.pos, prometheus.GaugeValue, pos, c.index, m.Source, m.Lane)
		}
		if m.Through.IsZero() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, max(0, now.Sub(m.Through).Seconds()), c.index, m.Source, m.Lane)
	}
}
