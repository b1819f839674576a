package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ragsync/ragsync/backfill"
	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// BatchProgress is where a batch lane stands: its recorded batches (Done
// of them handled) and their texts (Applied of them cached, Failed left to
// the online lane).
type BatchProgress struct {
	Batches, Done           int
	Inputs, Applied, Failed int64
}

// BatchResult is what a batch lane did before the normal pass.
type BatchResult struct {
	// Texts is how many distinct texts the pass would embed (after the
	// cache), as the pre-pass found them.
	Texts int
	// Created counts the batches this run created; Resumed those a
	// previous run had recorded and this one polled or applied.
	Created, Resumed int
	// Applied counts texts whose vectors the batches cached; Fallback
	// those the batches did not give (failed lines, bad vectors, failed or
	// expired batches, texts too long for a batch), which the normal pass
	// embeds online.
	Applied, Fallback int64
	Took              time.Duration
}

// collectFunc runs the pass a batch lane precedes, writing to target (a
// dry run that records what would be embedded) instead of the index.
type collectFunc func(ctx context.Context, target pipeline.Target) error

// batchLane runs the batch lane of a reindex or backfill into ix: it lists
// the texts the pass would embed (collect: the pass's own reading,
// rendering and chunking, against ix's cache), submits those no recorded
// batch covers through the provider's Batch API, recording every file and
// batch in embedding_batches before and after each step, polls until
// every recorded batch ends, and writes the vectors into ix's embedding
// cache; the pass that follows finds them there. A run killed at any point
// resumes from the records: applied batches are done, submitted ones
// polled, a file recorded without a batch id looked up in the provider's
// batch list before one is created. resume is the command that resumes,
// for the log when ctx ends first (the batches keep running at the
// provider).
func batchLane(ctx context.Context, ec embedder.Config, ix *Index, collect collectFunc, resume string,
	logger *slog.Logger, progress func(BatchProgress)) (BatchResult, error) {
	start := time.Now()
	ec = ec.WithDefaults()
	api, err := embedder.NewBatchAPI(withIdentity(ec, ix.Emb.Model(), ix.Emb.Dimensions()))
	if err != nil {
		return BatchResult{}, err
	}
	defer api.Close()
	if progress == nil {
		progress = func(BatchProgress) {}
	}
	l := &lane{api: api, cfg: ec, ix: ix, logger: logger.With("stage", "batch_lane"), progress: progress,
		rec: sink.NewBatches(ix.Pool, ix.Schema, ix.Name, ix.Emb.Model(), ix.Emb.Dimensions())}

	// The pre-pass: the pass itself, against a dry run that records what
	// it would embed after the cache.
	col := newTextCollector(ix)
	target := ix.Target()
	target.Index, target.Embedder = col.dry, col
	if err := collect(ctx, target); err != nil {
		return BatchResult{}, fmt.Errorf("batch lane: listing the texts to embed: %w", err)
	}
	l.texts = col.byHash
	res := BatchResult{Texts: len(col.order)}
	l.logger.InfoContext(ctx, "batch lane: texts to embed after the cache", "texts", len(col.order), "tokens", col.tokens)

	open, err := l.rec.Open(ctx)
	if err != nil {
		return res, err
	}
	// A row recorded before its upload finished: the file may exist under
	// its name. If it does not, the row is dropped and its texts cut
	// again below with the others.
	for i := range open {
		if err := l.findFile(ctx, &open[i]); err != nil {
			return res, err
		}
	}
	// The batches recorded before this run (a row still uploading was
	// dropped above): they cover their texts and are polled, not cut again.
	covered := map[string]bool{}
	var live []sink.BatchRecord
	for _, r := range open {
		if r.Status == sink.BatchStatusUploading {
			continue
		}
		live = append(live, r)
		for _, h := range r.Hashes {
			covered[h] = true
		}
	}
	var todo []string
	for _, h := range col.order {
		if !covered[h] {
			todo = append(todo, h)
		}
	}
	files, tooLong := l.cut(todo)
	res.Fallback += int64(tooLong)
	if tooLong > 0 {
		l.logger.WarnContext(ctx, "batch lane: texts over embedder.max_input_tokens are left to online requests", "texts", tooLong)
	}
	res.Resumed = len(live)
	for _, f := range files {
		r, err := l.rec.Add(ctx, f)
		if err != nil {
			return res, err
		}
		live = append(live, r)
	}
	l.all = live
	l.report()
	// Submit every file not yet a batch, then poll them all.
	for i := range live {
		if live[i].BatchID != "" {
			continue
		}
		created, err := l.submit(ctx, &live[i])
		if err != nil {
			return res, l.interrupted(ctx, err, resume)
		}
		if created {
			res.Created++
		}
	}
	applied, fallback, err := l.poll(ctx)
	res.Applied, res.Fallback = applied, res.Fallback+fallback
	res.Took = time.Since(start)
	if err != nil {
		return res, l.interrupted(ctx, err, resume)
	}
	if res.Fallback > 0 {
		l.logger.WarnContext(ctx, "batch lane: texts without a vector from their batch are embedded online by the pass", "texts", res.Fallback)
	}
	l.logger.InfoContext(ctx, "batch lane done", "texts", res.Texts, "batches_created", res.Created, "batches_resumed", res.Resumed,
		"applied", res.Applied, "fallback_online", res.Fallback, "took", res.Took.Round(time.Millisecond))
	return res, nil
}

// lane is one run of the batch lane.
type lane struct {
	api      *embedder.BatchAPI
	cfg      embedder.Config
	ix       *Index
	rec      *sink.Batches
	logger   *slog.Logger
	progress func(BatchProgress)
	texts    map[string]collected // by content hash
	all      []sink.BatchRecord   // this run's batches; Status tracks the provider's
	applied  int64
	failed   int64
}

func (l *lane) report() {
	p := BatchProgress{Batches: len(l.all), Applied: l.applied, Failed: l.failed}
	for _, r := range l.all {
		p.Inputs += int64(r.Inputs)
		if r.AppliedAt != nil {
			p.Done++
		}
	}
	l.progress(p)
}

// interrupted says, when ctx ended, that the batches keep running at the
// provider and how to pick them up.
func (l *lane) interrupted(ctx context.Context, err error, resume string) error {
	if ctx.Err() == nil {
		return err
	}
	open := 0
	for _, r := range l.all {
		if r.AppliedAt == nil && r.BatchID != "" {
			open++
		}
	}
	l.logger.Warn("batch lane interrupted: its batches keep running at the provider (recorded in embedding_batches); run the same command again to apply them without submitting them again",
		"open_batches", open, "resume", resume)
	return err
}

// findFile resolves a row recorded as uploading: the file it names, if
// the provider has it, is recorded; if not, the row is closed and its
// texts are cut again.
func (l *lane) findFile(ctx context.Context, r *sink.BatchRecord) error {
	if r.Status != sink.BatchStatusUploading {
		return nil
	}
	id, ok, err := l.api.FindFile(ctx, r.FileName)
	if err != nil {
		return err
	}
	if !ok {
		return l.rec.Close(ctx, r.ID, "abandoned", 0)
	}
	if err := l.rec.SetFile(ctx, r.ID, id); err != nil {
		return err
	}
	r.InputFileID, r.Status = id, sink.BatchStatusUploaded
	return nil
}

// requests returns r's request lines from the texts this run knows; a
// hash it does not know (cached since, or gone from the source) is left
// out: nothing needs it.
func (l *lane) requests(r sink.BatchRecord) []embedder.BatchRequest {
	var out []embedder.BatchRequest
	off := 0
	for _, n := range r.LineInputs {
		hs := r.Hashes[off : off+n]
		off += n
		req := embedder.BatchRequest{CustomID: hs[0]}
		for _, h := range hs {
			req.Texts = append(req.Texts, l.texts[h].text)
		}
		out = append(out, req)
	}
	return out
}

// submit uploads r's file (recorded first as uploading by Add) and
// creates its batch, recording each id as soon as the provider gives it.
// A file recorded without a batch id is looked up in the provider's batch
// list first: the run that uploaded it may have created the batch and
// died before recording it.
func (l *lane) submit(ctx context.Context, r *sink.BatchRecord) (created bool, err error) {
	if r.InputFileID == "" {
		id, err := l.api.Upload(ctx, r.FileName, l.requests(*r))
		if err != nil {
			return false, fmt.Errorf("batch lane: %w", err)
		}
		if err := l.rec.SetFile(ctx, r.ID, id); err != nil {
			return false, err
		}
		r.InputFileID, r.Status = id, sink.BatchStatusUploaded
	} else if bt, ok, err := l.api.FindBatch(ctx, r.InputFileID); err != nil {
		return false, fmt.Errorf("batch lane: %w", err)
	} else if ok {
		r.BatchID, r.Status = bt.ID, bt.Status
		return false, l.rec.SetBatch(ctx, r.ID, bt.ID, bt.Status)
	}
	bt, err := l.api.Create(ctx, r.InputFileID, l.cfg.Batch.CompletionWindow,
		map[string]any{"ragsync_index": l.ix.Name, "ragsync_file": r.FileName})
	if err != nil {
		return false, fmt.Errorf("batch lane: %w", err)
	}
	r.BatchID, r.Status = bt.ID, bt.Status
	return true, l.rec.SetBatch(ctx, r.ID, bt.ID, bt.Status)
}

// poll asks every open batch's status each poll interval and handles
// those that ended, until none is left.
func (l *lane) poll(ctx context.Context) (applied, fallback int64, err error) {
	for {
		left := 0
		for i := range l.all {
			r := &l.all[i]
			if r.AppliedAt != nil {
				continue
			}
			bt, err := l.api.Retrieve(ctx, r.BatchID)
			if err != nil && ctx.Err() == nil && !permanent(err) {
				// An outage of the provider's API does not end the batches:
				// ask again at the next poll.
				l.logger.WarnContext(ctx, "batch lane: could not ask a batch's state; asking again at the next poll", "batch", r.BatchID, "error", err)
				left++
				continue
			}
			if err != nil {
				return applied, fallback, fmt.Errorf("batch lane: %w", err)
			}
			if bt.Status != r.Status {
				if err := l.rec.SetStatus(ctx, r.ID, bt.Status); err != nil {
					return applied, fallback, err
				}
				r.Status = bt.Status
			}
			if !embedder.BatchDone(bt.Status) {
				left++
				continue
			}
			a, f, err := l.apply(ctx, r, bt)
			if err != nil && ctx.Err() == nil && errors.As(err, new(*resultsError)) && !permanent(err) {
				l.logger.WarnContext(ctx, "batch lane: could not download a batch's results; trying again at the next poll", "batch", r.BatchID, "error", err)
				left++
				continue
			}
			if err != nil {
				return applied, fallback, err
			}
			applied, fallback = applied+a, fallback+f
			l.applied, l.failed = l.applied+a, l.failed+f
			now := time.Now()
			r.AppliedAt = &now
			l.report()
		}
		if left == 0 {
			return applied, fallback, nil
		}
		select {
		case <-ctx.Done():
			return applied, fallback, ctx.Err()
		case <-time.After(l.cfg.Batch.PollInterval):
		}
	}
}

// apply writes a finished batch's vectors into the embedding cache and
// closes its record; texts without a vector are counted for the online
// lane. A failed, expired or cancelled batch gives none.
func (l *lane) apply(ctx context.Context, r *sink.BatchRecord, bt embedder.BatchInfo) (applied, fallback int64, err error) {
	if bt.Status != embedder.BatchCompleted {
		l.logger.WarnContext(ctx, "batch lane: a batch ended without results; its texts are embedded online", "batch", bt.ID,
			"status", bt.Status, "texts", r.Inputs, "errors", strings.Join(bt.Errors, "; "))
		return 0, int64(r.Inputs), l.rec.Close(ctx, r.ID, bt.Status, r.Inputs)
	}
	want := map[string]int{}
	lines := map[string][]string{}
	off := 0
	for _, n := range r.LineInputs {
		hs := r.Hashes[off : off+n]
		off += n
		want[hs[0]], lines[hs[0]] = n, hs
	}
	res, err := l.api.Results(ctx, bt, want)
	if err != nil {
		return 0, 0, &resultsError{err}
	}
	var hashes, texts []string
	var vecs [][]float32
	for cid, hs := range lines {
		vs, ok := res.Vectors[cid]
		if !ok {
			fallback += int64(len(hs))
			continue
		}
		for i, h := range hs {
			t, known := l.texts[h]
			if !known {
				continue // not needed by this run (cached since, or gone)
			}
			hashes, texts, vecs = append(hashes, h), append(texts, t.text), append(vecs, vs[i])
		}
	}
	if len(res.Failed) > 0 {
		var reasons []string
		for cid, why := range res.Failed {
			if len(reasons) < 3 {
				reasons = append(reasons, cid[:min(12, len(cid))]+": "+why)
			}
		}
		l.logger.WarnContext(ctx, "batch lane: requests of a batch failed; their texts are embedded online", "batch", bt.ID,
			"requests", len(res.Failed), "texts", fallback, "first_errors", strings.Join(reasons, "; "))
	}
	for start := 0; start < len(hashes); start += 5000 {
		end := min(start+5000, len(hashes))
		if err := l.ix.Store.CacheVectors(ctx, hashes[start:end], texts[start:end], vecs[start:end], l.ix.Emb.Model()); err != nil {
			return 0, 0, err
		}
	}
	return int64(len(hashes)), fallback, l.rec.Close(ctx, r.ID, sink.BatchStatusApplied, int(fallback))
}

// cut splits the texts of hashes into batch files: requests of at most
// embedder.max_batch_inputs texts and max_batch_tokens tokens, files of at
// most embedder.batch.max_requests_per_file requests, max_inputs_per_file
// texts and max_file_bytes bytes. Texts over max_input_tokens are left
// out (tooLong): the online client truncates or dead-letters them.
func (l *lane) cut(hashes []string) (files []sink.BatchRecord, tooLong int) {
	ec, bc := l.cfg, l.cfg.Batch
	stamp := time.Now().UTC().Format("20060102T150405.000000000")
	var f *sink.BatchRecord
	var fileBytes int64
	var req embedder.BatchRequest
	var reqHashes []string
	reqTokens := 0
	flushReq := func() {
		if len(reqHashes) == 0 {
			return
		}
		size := int64(len(l.api.FileLine(req))) + 1
		if f != nil && (len(f.LineInputs) >= bc.MaxRequestsPerFile || f.Inputs+len(reqHashes) > bc.MaxInputsPerFile ||
			fileBytes+size > bc.MaxFileBytes) {
			files, f = append(files, *f), nil
		}
		if f == nil {
			f = &sink.BatchRecord{FileName: fmt.Sprintf("ragsync-%s-%s-%d.jsonl", l.ix.Name, stamp, len(files))}
			fileBytes = 0
		}
		f.Hashes = append(f.Hashes, reqHashes...)
		f.LineInputs = append(f.LineInputs, len(reqHashes))
		f.Inputs += len(reqHashes)
		f.Tokens += int64(reqTokens)
		fileBytes += size
		req, reqHashes, reqTokens = embedder.BatchRequest{}, nil, 0
	}
	for _, h := range hashes {
		t := l.texts[h]
		if t.tokens > ec.MaxInputTokens {
			tooLong++
			continue
		}
		if len(reqHashes) > 0 && (len(reqHashes) >= ec.MaxBatchInputs || reqTokens+t.tokens > ec.MaxBatchTokens ||
			len(reqHashes) >= bc.MaxInputsPerFile) {
			flushReq()
		}
		if len(reqHashes) == 0 {
			req.CustomID = h
		}
		req.Texts = append(req.Texts, t.text)
		reqHashes = append(reqHashes, h)
		reqTokens += t.tokens
	}
	flushReq()
	if f != nil {
		files = append(files, *f)
	}
	return files, tooLong
}

// collected is a text the pass would embed, with its token count.
type collected struct {
	text   string
	tokens int
}

// textCollector stands in for the pass's embedder in the batch lane's
// pre-pass: it records every distinct text the pass asks to embed (after
// the cache, which the dry run answers from the index) and answers with
// the dry run's zero vectors.
type textCollector struct {
	dry    *backfill.DryRun
	mu     sync.Mutex
	byHash map[string]collected
	order  []string
	tokens int64
}

func newTextCollector(ix *Index) *textCollector {
	return &textCollector{dry: backfill.NewDryRun(ix.Store, ix.Emb.Dimensions()), byHash: map[string]collected{}}
}

func (c *textCollector) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return c.EmbedCounted(ctx, texts, nil)
}

func (c *textCollector) EmbedCounted(ctx context.Context, texts []string, tokens []int) ([][]float32, error) {
	if tokens != nil && len(tokens) != len(texts) {
		return nil, errors.New("batch lane: token counts do not match the texts")
	}
	c.mu.Lock()
	for i, t := range texts {
		h := chunker.Hash(t)
		if _, ok := c.byHash[h]; ok {
			continue
		}
		n := 0
		if tokens != nil {
			n = tokens[i]
		} else {
			n = chunker.CountTokens(t)
		}
		c.byHash[h] = collected{text: t, tokens: n}
		c.order = append(c.order, h)
		c.tokens += int64(n)
	}
	c.mu.Unlock()
	return c.dry.EmbedCounted(ctx, texts, tokens)
}

func (c *textCollector) ReportedModel() string { return "" }

// permanent says whether err will not go away by asking again (a 4xx other
// than 429, a missing Batch API).
func permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.Is(err, embedder.ErrNoBatchAPI) || (errors.As(err, &p) && p.Permanent())
}

// resultsError is a failed download of a batch's results: nothing was
// written, the next poll tries again.
type resultsError struct{ err error }

func (e *resultsError) Error() string { return "batch lane: " + e.err.Error() }
func (e *resultsError) Unwrap() error { return e.err }
