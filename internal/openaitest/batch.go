package openaitest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ragsync/ragsync/chunker"
	"github.com/ragsync/ragsync/embedder"
)

// BatchOptions configure the fake's Batch API (/v1/files, /v1/batches), as
// OpenAI serves it for the embeddings endpoint.
type BatchOptions struct {
	// Disabled serves no Batch API: /v1/files and /v1/batches answer 404,
	// as a provider without one (most self-hosted servers) does.
	Disabled bool
	// Processing is how long a batch takes from its creation to
	// "completed": the first quarter "validating", then "in_progress",
	// then "finalizing" for the last quarter. Defaults to 0: a batch is
	// complete the first time it is retrieved after its creation.
	Processing time.Duration
	// MaxLines is the most request lines a file may hold (OpenAI: 50,000);
	// a batch over a longer file fails validation. Defaults to 50,000.
	MaxLines int
}

// BatchFault changes how one batch ends.
type BatchFault struct {
	// FailLines names custom ids whose requests fail with a 500: their
	// lines go to the error file, the others complete.
	FailLines []string
	// Fail makes the whole batch fail as if it had not validated.
	Fail bool
	// Expire makes the batch expire: no line is answered, every line goes
	// to the error file with code batch_expired.
	Expire bool
	// Processing, if > 0, replaces BatchOptions.Processing for this batch.
	Processing time.Duration
}

// BatchCounts are what the fake's Batch API was asked to do.
type BatchCounts struct {
	// FilesUploaded counts POST /v1/files accepted.
	FilesUploaded int
	// UploadedContents holds the SHA-256 (hex) of every uploaded file's
	// content, in upload order: a file uploaded twice appears twice.
	UploadedContents []string
	// BatchesCreated counts POST /v1/batches accepted.
	BatchesCreated int
	// BatchInputFiles holds the input file id of every created batch, in
	// creation order: a file batched twice appears twice.
	BatchInputFiles []string
}

type fakeFile struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Bytes     int    `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	FileName  string `json:"filename"`
	Purpose   string `json:"purpose"`
	Status    string `json:"status"`
	content   []byte
}

type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

type fakeBatch struct {
	ID               string         `json:"id"`
	Object           string         `json:"object"`
	Endpoint         string         `json:"endpoint"`
	Errors           any            `json:"errors"`
	InputFileID      string         `json:"input_file_id"`
	CompletionWindow string         `json:"completion_window"`
	Status           string         `json:"status"`
	OutputFileID     *string        `json:"output_file_id"`
	ErrorFileID      *string        `json:"error_file_id"`
	CreatedAt        int64          `json:"created_at"`
	InProgressAt     *int64         `json:"in_progress_at"`
	FinalizingAt     *int64         `json:"finalizing_at"`
	CompletedAt      *int64         `json:"completed_at"`
	FailedAt         *int64         `json:"failed_at"`
	ExpiredAt        *int64         `json:"expired_at"`
	CancelledAt      *int64         `json:"cancelled_at"`
	ExpiresAt        int64          `json:"expires_at"`
	RequestCounts    map[string]int `json:"request_counts"`
	Metadata         map[string]any `json:"metadata"`

	created  time.Time
	lines    []batchLine  // the validated input, nil if it failed validation
	invalid  []batchError // why validation failed
	fault    BatchFault
	finished bool // a terminal status is set and its files written
}

// batchLine is one request line of an input file.
type batchLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// batchState is the Batch API's state; the zero value is empty.
type batchState struct {
	mu      sync.Mutex
	seq     int
	files   map[string]*fakeFile
	fileIDs []string // upload order
	batches map[string]*fakeBatch
	order   []string // creation order
	counts  BatchCounts
	hook    func(n int, customIDs []string) BatchFault
	fails   []int // statuses of the next Batch API calls to fail
}

// FailNextBatchCalls makes the next n calls of the Batch API's routes fail
// with status (a 500 or 503 outage, a 429), changing nothing.
func (s *Server) FailNextBatchCalls(n, status int) {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	for range n {
		s.batch.fails = append(s.batch.fails, status)
	}
}

// SetBatchHook installs f to pick how the n-th created batch (0-based)
// ends, given its lines' custom ids; nil: every batch completes. f runs on
// server goroutines.
func (s *Server) SetBatchHook(f func(n int, customIDs []string) BatchFault) {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	s.batch.hook = f
}

// BatchCounts returns what the Batch API was asked so far.
func (s *Server) BatchCounts() BatchCounts {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	c := s.batch.counts
	c.UploadedContents = slices.Clone(c.UploadedContents)
	c.BatchInputFiles = slices.Clone(c.BatchInputFiles)
	return c
}

// serveBatch answers the Batch API's routes and reports whether r was one.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.Path
	i := strings.Index(path, "/v1/")
	if i < 0 {
		return false
	}
	parts := strings.Split(strings.Trim(path[i+len("/v1/"):], "/"), "/")
	if parts[0] != "files" && parts[0] != "batches" {
		return false
	}
	if s.opts.Batch.Disabled {
		return false // the embeddings handler's 404
	}
	if s.opts.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "Incorrect API key provided.")
		return true
	}
	b := &s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.files == nil {
		b.files, b.batches = map[string]*fakeFile{}, map[string]*fakeBatch{}
	}
	if len(b.fails) > 0 {
		status := b.fails[0]
		b.fails = b.fails[1:]
		writeError(w, status, "server_error", fmt.Sprintf("injected fault %d", status))
		return true
	}
	switch {
	case parts[0] == "files" && len(parts) == 1 && r.Method == http.MethodPost:
		s.uploadFile(w, r)
	case parts[0] == "files" && len(parts) == 1 && r.Method == http.MethodGet:
		list := make([]*fakeFile, 0, len(b.fileIDs))
		for _, id := range b.fileIDs {
			list = append(list, b.files[id])
		}
		writeJSON(w, map[string]any{"object": "list", "data": list, "has_more": false})
	case parts[0] == "files" && len(parts) >= 2 && r.Method == http.MethodGet:
		f, ok := b.files[parts[1]]
		switch {
		case !ok:
			writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("No such File object: %s", parts[1]))
		case len(parts) == 2:
			writeJSON(w, f)
		case len(parts) == 3 && parts[2] == "content":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(f.content)
		default:
			writeError(w, http.StatusNotFound, "invalid_request_error", "no route "+path)
		}
	case parts[0] == "batches" && len(parts) == 1 && r.Method == http.MethodPost:
		s.createBatch(w, r)
	case parts[0] == "batches" && len(parts) == 1 && r.Method == http.MethodGet:
		s.listBatches(w, r)
	case parts[0] == "batches" && len(parts) == 2 && r.Method == http.MethodGet:
		bt, ok := b.batches[parts[1]]
		if !ok {
			writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("No batch found with id '%s'.", parts[1]))
			return true
		}
		s.advance(bt)
		writeJSON(w, bt)
	case parts[0] == "batches" && len(parts) == 3 && parts[2] == "cancel" && r.Method == http.MethodPost:
		bt, ok := b.batches[parts[1]]
		if !ok {
			writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("No batch found with id '%s'.", parts[1]))
			return true
		}
		s.advance(bt)
		if !bt.finished {
			now := time.Now().Unix()
			bt.Status, bt.CancelledAt, bt.finished = "cancelled", &now, true
		}
		writeJSON(w, bt)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("no route %s %s", r.Method, path))
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// newID returns a fresh id with prefix; the caller holds the lock.
func (b *batchState) newID(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s%06d", prefix, b.seq)
}

// addFile stores content as a new file; the caller holds the lock.
func (b *batchState) addFile(name, purpose string, content []byte) *fakeFile {
	f := &fakeFile{ID: b.newID("file-"), Object: "file", Bytes: len(content), CreatedAt: time.Now().Unix(),
		FileName: name, Purpose: purpose, Status: "processed", content: content}
	b.files[f.ID] = f
	b.fileIDs = append(b.fileIDs, f.ID)
	return f
}

// uploadFile is POST /v1/files: multipart with "purpose" and "file".
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(256 << 20); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "expected a multipart/form-data body: "+err.Error())
		return
	}
	purpose := r.FormValue("purpose")
	if purpose != "batch" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("'%s' is not one of ['fine-tune', 'assistants', 'batch', 'user_data', 'vision', 'evals'] - 'purpose'", purpose))
		return
	}
	file, hdr, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "'file' is required")
		return
	}
	defer file.Close()
	content, err := io.ReadAll(file)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if len(content) > 200<<20 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "File is too large: the maximum size for batch input files is 200 MB")
		return
	}
	b := &s.batch
	f := b.addFile(hdr.Filename, purpose, content)
	sum := sha256.Sum256(content)
	b.counts.FilesUploaded++
	b.counts.UploadedContents = append(b.counts.UploadedContents, hex.EncodeToString(sum[:]))
	writeJSON(w, f)
}

// createBatch is POST /v1/batches. The request itself is checked at once
// (400, as OpenAI answers); the file's lines are validated into the
// batch, which fails with their errors, as OpenAI's does.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string         `json:"input_file_id"`
		Endpoint         string         `json:"endpoint"`
		CompletionWindow string         `json:"completion_window"`
		Metadata         map[string]any `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	b := &s.batch
	switch {
	case req.Endpoint != "/v1/embeddings" && req.Endpoint != "/v1/chat/completions" && req.Endpoint != "/v1/completions" && req.Endpoint != "/v1/responses":
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Invalid value for 'endpoint': '%s'.", req.Endpoint))
		return
	case req.CompletionWindow != "24h":
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Invalid value for 'completion_window': '%s'. Supported values are: '24h'.", req.CompletionWindow))
		return
	case b.files[req.InputFileID] == nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("No such File object: %s", req.InputFileID))
		return
	case b.files[req.InputFileID].Purpose != "batch":
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("File %s was not uploaded with purpose 'batch'.", req.InputFileID))
		return
	}
	now := time.Now()
	bt := &fakeBatch{ID: b.newID("batch_"), Object: "batch", Endpoint: req.Endpoint, InputFileID: req.InputFileID,
		CompletionWindow: req.CompletionWindow, Status: "validating", CreatedAt: now.Unix(),
		ExpiresAt: now.Add(24 * time.Hour).Unix(), Metadata: req.Metadata, created: now,
		RequestCounts: map[string]int{"total": 0, "completed": 0, "failed": 0}}
	bt.lines, bt.invalid = validateLines(b.files[req.InputFileID].content, req.Endpoint, s.opts.Batch.maxLines())
	var ids []string
	for _, l := range bt.lines {
		ids = append(ids, l.CustomID)
	}
	if b.hook != nil {
		bt.fault = b.hook(b.counts.BatchesCreated, ids)
	}
	b.batches[bt.ID] = bt
	b.order = append(b.order, bt.ID)
	b.counts.BatchesCreated++
	b.counts.BatchInputFiles = append(b.counts.BatchInputFiles, req.InputFileID)
	writeJSON(w, bt)
}

func (o BatchOptions) maxLines() int {
	if o.MaxLines > 0 {
		return o.MaxLines
	}
	return 50_000
}

// validateLines parses an input file as OpenAI's batch validation does:
// every line a JSON object with a unique custom_id, method POST and the
// batch's endpoint as url. Any error fails the whole batch.
func validateLines(content []byte, endpoint string, maxLines int) ([]batchLine, []batchError) {
	var lines []batchLine
	var errs []batchError
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(content))
	sc.Buffer(nil, 256<<20)
	n := 0
	for sc.Scan() {
		n++
		lineNo := n
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		bad := func(code, msg string) { errs = append(errs, batchError{Code: code, Message: msg, Line: &lineNo}) }
		var l batchLine
		if err := json.Unmarshal(raw, &l); err != nil {
			bad("invalid_json_line", "This line is not parseable as valid JSON.")
			continue
		}
		switch {
		case l.CustomID == "":
			bad("missing_required_parameter", "Missing required parameter: 'custom_id'.")
		case seen[l.CustomID]:
			bad("duplicate_custom_id", "The custom_id for this request is a duplicate of another request. The custom_id parameter must be unique for each request in a batch.")
		case l.Method != http.MethodPost:
			bad("invalid_method", fmt.Sprintf("Invalid value for 'method': '%s'. Supported values are: 'POST'.", l.Method))
		case l.URL != endpoint:
			bad("mismatched_endpoint", fmt.Sprintf("The provided url '%s' does not match the batch endpoint '%s'.", l.URL, endpoint))
		case len(l.Body) == 0 || l.Body[0] != '{':
			bad("invalid_request", "Missing required parameter: 'body'.")
		}
		seen[l.CustomID] = true
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, batchError{Code: "invalid_file", Message: err.Error()})
	}
	if len(lines) == 0 && len(errs) == 0 {
		errs = append(errs, batchError{Code: "empty_file", Message: "The input file is empty."})
	}
	if len(lines) > maxLines {
		errs = append(errs, batchError{Code: "too_many_requests", Message: fmt.Sprintf("The batch input file has %d requests, at most %d are allowed.", len(lines), maxLines)})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return lines, nil
}

// advance moves bt along its life by the time elapsed since its creation,
// and writes its output and error files when it ends. The caller holds the
// lock.
func (s *Server) advance(bt *fakeBatch) {
	if bt.finished {
		return
	}
	p := s.opts.Batch.Processing
	if bt.fault.Processing > 0 {
		p = bt.fault.Processing
	}
	elapsed := time.Since(bt.created)
	now := time.Now().Unix()
	if elapsed < p/4 {
		return // validating
	}
	if bt.invalid != nil || bt.fault.Fail {
		errs := bt.invalid
		if errs == nil {
			errs = []batchError{{Code: "injected_failure", Message: "injected batch failure"}}
		}
		bt.Status, bt.FailedAt, bt.finished = "failed", &now, true
		bt.Errors = map[string]any{"object": "list", "data": errs}
		return
	}
	bt.RequestCounts["total"] = len(bt.lines)
	if bt.InProgressAt == nil {
		bt.InProgressAt = &now
	}
	if bt.fault.Expire && elapsed >= p {
		var errLines [][]byte
		for i, l := range bt.lines {
			errLines = append(errLines, mustJSON(map[string]any{"id": fmt.Sprintf("batch_req_%s_%d", bt.ID, i), "custom_id": l.CustomID,
				"response": nil, "error": map[string]any{"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}))
		}
		id := s.batch.addFile(bt.ID+"_error.jsonl", "batch_output", bytes.Join(errLines, []byte("\n"))).ID
		bt.ErrorFileID = &id
		bt.RequestCounts["failed"] = len(bt.lines)
		bt.Status, bt.ExpiredAt, bt.finished = "expired", &now, true
		return
	}
	if elapsed < p*3/4 {
		bt.Status = "in_progress"
		return
	}
	if elapsed < p {
		bt.Status = "finalizing"
		bt.FinalizingAt = &now
		return
	}
	failing := map[string]bool{}
	for _, id := range bt.fault.FailLines {
		failing[id] = true
	}
	var out, errLines [][]byte
	// Answered in an order other than the input's, as OpenAI's may be: a
	// client must match lines by custom_id.
	for i := len(bt.lines) - 1; i >= 0; i-- {
		l := bt.lines[i]
		status, body := s.embedLine(l.Body)
		if failing[l.CustomID] {
			status, body = http.StatusInternalServerError, errorBody("server_error", "injected line failure")
		}
		line := mustJSON(map[string]any{"id": fmt.Sprintf("batch_req_%s_%d", bt.ID, i), "custom_id": l.CustomID,
			"response": map[string]any{"status_code": status, "request_id": fmt.Sprintf("req_%s_%d", bt.ID, i), "body": body}, "error": nil})
		if status == http.StatusOK {
			out = append(out, line)
		} else {
			errLines = append(errLines, line)
		}
	}
	if len(out) > 0 {
		id := s.batch.addFile(bt.ID+"_output.jsonl", "batch_output", bytes.Join(out, []byte("\n"))).ID
		bt.OutputFileID = &id
	}
	if len(errLines) > 0 {
		id := s.batch.addFile(bt.ID+"_error.jsonl", "batch_output", bytes.Join(errLines, []byte("\n"))).ID
		bt.ErrorFileID = &id
	}
	bt.RequestCounts["completed"], bt.RequestCounts["failed"] = len(out), len(errLines)
	if bt.FinalizingAt == nil {
		bt.FinalizingAt = &now
	}
	bt.Status, bt.CompletedAt, bt.finished = "completed", &now, true
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func errorBody(typ, msg string) map[string]any {
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}}
}

// embedLine answers one line's body as POST /v1/embeddings would, with
// the same vectors (the Vectors hook or the hashing embedder, then the
// transform), so a batch and an online request give equal results.
func (s *Server) embedLine(raw json.RawMessage) (int, any) {
	var wr wireRequest
	if err := json.Unmarshal(raw, &wr); err != nil {
		return http.StatusBadRequest, errorBody("invalid_request_error", "invalid JSON body: "+err.Error())
	}
	var input []string
	if err := decodeInput(wr.Input, &input); err != nil {
		return http.StatusBadRequest, errorBody("invalid_request_error", err.Error())
	}
	switch {
	case wr.Model == "":
		return http.StatusBadRequest, errorBody("invalid_request_error", "you must provide a model parameter")
	case len(s.opts.Models) > 0 && !contains(s.opts.Models, wr.Model):
		return http.StatusNotFound, errorBody("invalid_request_error", fmt.Sprintf("The model `%s` does not exist", wr.Model))
	case len(input) == 0:
		return http.StatusBadRequest, errorBody("invalid_request_error", "'$.input' is invalid: empty")
	case s.opts.MaxInputs > 0 && len(input) > s.opts.MaxInputs:
		return http.StatusBadRequest, errorBody("invalid_request_error", fmt.Sprintf("'$.input' is invalid: %d inputs, at most %d allowed", len(input), s.opts.MaxInputs))
	}
	tokens := 0
	for i, in := range input {
		if in == "" {
			return http.StatusBadRequest, errorBody("invalid_request_error", fmt.Sprintf("'$.input[%d]' is invalid: empty string", i))
		}
		tokens += chunker.CountTokens(in)
	}
	if s.opts.MaxTokens > 0 && tokens > s.opts.MaxTokens {
		return http.StatusBadRequest, errorBody("invalid_request_error", fmt.Sprintf("Requested %d tokens, max %d tokens per request", tokens, s.opts.MaxTokens))
	}
	dims := s.opts.Dimensions
	if wr.Dimensions > 0 {
		dims = wr.Dimensions
	}
	var vecs [][]float32
	var err error
	if s.opts.Vectors != nil {
		vecs, err = s.opts.Vectors(input, dims)
		if err == nil && len(vecs) != len(input) {
			err = fmt.Errorf("the vectors hook gave %d vectors for %d inputs", len(vecs), len(input))
		}
	} else {
		vecs, err = embedder.NewHashing(dims).Embed(context.Background(), input)
	}
	if err != nil {
		return http.StatusInternalServerError, errorBody("server_error", err.Error())
	}
	s.mu.Lock()
	xform := s.xform
	s.mu.Unlock()
	resp := wireResponse{Object: "list", Model: wr.Model}
	resp.Usage.PromptTokens, resp.Usage.TotalTokens = tokens, tokens
	for i, v := range vecs {
		if xform != nil {
			v = xform(wr.Model, input[i], v)
		}
		e := wireEmbedding{Object: "embedding", Index: i, Embedding: v}
		if wr.EncodingFormat == "base64" && s.opts.NoBase64 == "" {
			e.Embedding = encodeBase64(v)
		}
		resp.Data = append(resp.Data, e)
	}
	return http.StatusOK, resp
}

// listBatches is GET /v1/batches: newest first, limit (1..100, default
// 20) and after (a batch id) paging, as OpenAI lists them.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	b := &s.batch
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Invalid 'limit': %q, expected an integer in 1..100.", v))
			return
		}
		limit = n
	}
	ids := slices.Clone(b.order)
	slices.Reverse(ids)
	if after := r.URL.Query().Get("after"); after != "" {
		i := slices.Index(ids, after)
		if i < 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("No batch found with id '%s'.", after))
			return
		}
		ids = ids[i+1:]
	}
	more := len(ids) > limit
	ids = ids[:min(limit, len(ids))]
	data := make([]*fakeBatch, 0, len(ids))
	for _, id := range ids {
		bt := b.batches[id]
		s.advance(bt)
		data = append(data, bt)
	}
	resp := map[string]any{"object": "list", "data": data, "has_more": more, "first_id": nil, "last_id": nil}
	if len(ids) > 0 {
		resp["first_id"], resp["last_id"] = ids[0], ids[len(ids)-1]
	}
	writeJSON(w, resp)
}
