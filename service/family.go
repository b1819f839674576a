package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// errPrimaryDropped stops serve when the index its pipeline writes was
// dropped under it (after a promote): a restart resolves index: again.
var errPrimaryDropped = errors.New("the index serve writes to was dropped (ragsync index drop); restart serve: it then writes to the alias's target")

// family keeps a running serve in step with the aliases and index states
// (blue/green re-index): every index_poll it hands the pipeline
// the shadows to dual-write (the other indexes that follow the configured
// name) and points the front door at the alias's current target.
type family struct {
	cfg     IndexConfig // as configured: Index is the alias or index name
	every   time.Duration
	primary *Index // the index the pipeline writes, resolved at start
	cat     *sink.Catalog
	p       *pipeline.Pipeline
	fd      *frontDoor // nil without a front door
	// tapQuery wraps a front door embedder (the monitor's query tap).
	tapQuery func(embedder.Client) embedder.Client
	logger   *slog.Logger

	shadows map[string]shadowIndex
	// serving, set by serve, is refreshed at every poll so that other
	// commands keep seeing this serve after a lost connection.
	serving *sink.ServingHold
}

// shadowIndex is an opened index of the family.
type shadowIndex struct {
	info sink.IndexInfo
	ix   *Index
}

func newFamily(cfg IndexConfig, poll time.Duration, primary *Index, p *pipeline.Pipeline, fd *frontDoor, tap func(embedder.Client) embedder.Client, logger *slog.Logger) *family {
	return &family{cfg: cfg, every: poll, primary: primary, cat: sink.NewCatalog(primary.Pool, cfg.Schema), p: p, fd: fd,
		tapQuery: tap, logger: logger.With("stage", "family"), shadows: map[string]shadowIndex{}}
}

// run polls until ctx ends. A failed poll is logged and tried again; only a
// dropped primary stops serve.
func (f *family) run(ctx context.Context) error {
	every := f.every
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := f.poll(ctx); errors.Is(err, errPrimaryDropped) {
			return err
		} else if err != nil && ctx.Err() == nil {
			f.logger.WarnContext(ctx, "reading aliases and index states failed; will retry at the next index_poll", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// poll reads the family once and applies it.
func (f *family) poll(ctx context.Context) error {
	if f.serving != nil {
		if err := f.serving.Refresh(ctx); err != nil {
			return err
		}
	}
	if _, found, err := f.cat.Resolve(ctx, f.primary.Name); err != nil {
		return err
	} else if !found {
		return fmt.Errorf("index %s: %w", f.primary.Name, errPrimaryDropped)
	}
	infos, err := f.cat.Shadows(ctx, f.primary.Name, f.cfg.Index)
	if err != nil {
		return err
	}
	next := map[string]shadowIndex{}
	changed := false
	for _, x := range infos {
		if s, ok := f.shadows[x.Name]; ok && s.info.Model == x.Model && s.info.Dimensions == x.Dimensions {
			s.info = x
			next[x.Name] = s
			continue
		}
		s, err := f.open(ctx, x)
		if err != nil {
			// Not this shadow this time; the others go on.
			f.logger.WarnContext(ctx, "cannot open shadow index; its changes are not dual-written until it opens (ragsync reindex --to it again catches up)",
				"shadow", x.Name, "error", err)
			continue
		}
		next[x.Name] = s
		changed = true
	}
	if changed || !sameKeys(next, f.shadows) {
		var list []pipeline.Target
		for _, s := range next {
			list = append(list, s.ix.Target())
		}
		slices.SortFunc(list, func(a, b pipeline.Target) int { return strings.Compare(a.Name, b.Name) })
		// Returns once the batch in flight is done: from here on every
		// change reaches these shadows, so the mark below is true.
		if err := f.p.SetShadows(list); err != nil {
			return err
		}
		f.shadows = next
		f.logger.InfoContext(ctx, "dual-writing", "primary", f.primary.Name, "shadows", f.p.Shadows())
	}
	for _, s := range next {
		if s.info.DualWriteSince == nil {
			if err := f.cat.MarkDualWrite(ctx, s.info.Name); err != nil {
				return err
			}
		}
	}
	return f.follow(ctx)
}

// follow points the front door at the configured name's current target.
func (f *family) follow(ctx context.Context) error {
	if f.fd == nil {
		return nil
	}
	r, found, err := f.cat.Resolve(ctx, f.cfg.Index)
	if err != nil || !found || r.Index.Name == f.fd.fd.Target() {
		return err
	}
	var emb embedder.Client
	var st *sink.Store
	switch s, ok := f.shadows[r.Index.Name]; {
	case r.Index.Name == f.primary.Name:
		emb, st = f.primary.Emb, f.primary.Store
	case ok:
		emb, st = s.ix.Emb, s.ix.Store
	default:
		s, err := f.open(ctx, r.Index)
		if err != nil {
			return err
		}
		emb, st = s.ix.Emb, s.ix.Store
	}
	from := f.fd.fd.Target()
	f.fd.fd.SetTarget(r.Index.Name, f.tapQuery(emb), st)
	f.fd.fd.SetWatermark(st)
	if _, err := fallback.BumpGeneration(ctx, f.fd.rdb, f.fd.cfg.Prefix, f.fd.cfg.Index); err != nil {
		// Cached answers carry the physical index: none crosses over.
		f.logger.WarnContext(ctx, "bump the front door's cache generation after the switch", "error", err)
	}
	f.logger.InfoContext(ctx, "front door switched", "alias", f.cfg.Index, "from", from, "to", r.Index.Name, "model", r.Index.Model, "dimensions", r.Index.Dimensions)
	return nil
}

// open opens an index of the family (openShadow).
func (f *family) open(ctx context.Context, x sink.IndexInfo) (shadowIndex, error) {
	ix, err := openShadow(ctx, f.cfg, f.primary, x, f.logger)
	if err != nil {
		return shadowIndex{}, err
	}
	return shadowIndex{info: x, ix: ix}, nil
}

func sameKeys(a, b map[string]shadowIndex) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
