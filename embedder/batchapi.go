package embedder

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Statuses of a provider batch, as OpenAI's Batch API names them.
const (
	BatchValidating = "validating"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchFailed     = "failed"
	BatchExpired    = "expired"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
)

// BatchDone reports whether status is final: completed, failed, expired or
// cancelled.
func BatchDone(status string) bool {
	switch status {
	case BatchCompleted, BatchFailed, BatchExpired, BatchCancelled:
		return true
	}
	return false
}

// BatchRequest is one line of a batch input file: one embeddings request
// of Texts under a custom id unique within its file.
type BatchRequest struct {
	CustomID string
	Texts    []string
}

// BatchInfo is what the provider says of a batch.
type BatchInfo struct {
	ID          string
	InputFileID string
	Status      string
	// OutputFileID and ErrorFileID are "" until the batch ends with them.
	OutputFileID, ErrorFileID string
	// Total, Completed and Failed count the batch's request lines.
	Total, Completed, Failed int
	// Errors is why a batch failed validation, one entry a problem.
	Errors []string
}

// BatchResults are the vectors of a finished batch by custom id (each in
// its request's input order), and why each request without vectors
// failed.
type BatchResults struct {
	Vectors map[string][][]float32
	Failed  map[string]string
}

// BatchAPI submits embeddings to the provider's asynchronous Batch API
// (POST /v1/files, /v1/batches): half the price of online requests, done
// within a completion window. Only OpenAI's API (api_type openai) has it;
// Azure's batch deployments work differently and are refused. Safe for
// concurrent use.
type BatchAPI struct {
	o *OpenAI
}

// NewBatchAPI returns a Batch API client for cfg, or an error naming why
// cfg has none: another provider, or api_type azure.
func NewBatchAPI(cfg Config) (*BatchAPI, error) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.Provider != ProviderOpenAI:
		return nil, fmt.Errorf("embedder.batch.enabled: the batch lane needs provider %q (the provider's Batch API), got %q; set embedder.batch.enabled: false (or leave out --batch)", ProviderOpenAI, cfg.Provider)
	case cfg.APIType == APITypeAzure:
		return nil, fmt.Errorf("embedder.batch.enabled: api_type azure is not supported by the batch lane (Azure's Batch API needs a global-batch deployment and its own file endpoints); set embedder.batch.enabled: false (or leave out --batch)")
	}
	o, err := NewOpenAI(cfg)
	if err != nil {
		return nil, err
	}
	return &BatchAPI{o: o}, nil
}

// Close releases idle HTTP connections.
func (b *BatchAPI) Close() { b.o.Close() }

// FileLine returns the JSONL line of r as it is uploaded: an embeddings
// request of the configured model (and dimensions when they are sent),
// asking for base64 unless embedder.encoding_format is float. Its length
// counts toward the provider's file size limit.
func (b *BatchAPI) FileLine(r BatchRequest) []byte {
	req := openai.EmbeddingRequest{Input: r.Texts, Model: openai.EmbeddingModel(b.o.cfg.Model)}
	if b.o.sendDims {
		req.Dimensions = b.o.cfg.Dimensions
	}
	if b.o.cfg.EncodingFormat != EncodingFloat {
		req.EncodingFormat = openai.EmbeddingEncodingFormatBase64
	}
	return openai.BatchEmbeddingRequest{CustomID: r.CustomID, Body: req, Method: http.MethodPost,
		URL: openai.BatchEndpointEmbeddings}.MarshalBatchLineItem()
}

// batchLine lets a line made by FileLine go into go-openai's upload.
type batchLine []byte

func (l batchLine) MarshalBatchLineItem() []byte { return l }

// Upload uploads reqs as one batch input file named name and returns its
// file id.
func (b *BatchAPI) Upload(ctx context.Context, name string, reqs []BatchRequest) (string, error) {
	up := openai.UploadBatchFileRequest{FileName: name}
	for _, r := range reqs {
		up.Lines = append(up.Lines, batchLine(b.FileLine(r)))
	}
	f, err := b.o.client.UploadBatchFile(ctx, up)
	if err != nil {
		return "", b.refuse("upload the batch input file", err)
	}
	return f.ID, nil
}

// FindFile returns the id of the newest uploaded file named name, if any:
// a run killed between its upload and recording the id finds it here
// instead of uploading it again.
func (b *BatchAPI) FindFile(ctx context.Context, name string) (string, bool, error) {
	list, err := b.o.client.ListFiles(ctx)
	if err != nil {
		return "", false, b.refuse("list uploaded files", err)
	}
	id, newest := "", int64(-1)
	for _, f := range list.Files {
		if f.FileName == name && f.Purpose == string(openai.PurposeBatch) && f.CreatedAt >= newest {
			id, newest = f.ID, f.CreatedAt
		}
	}
	return id, id != "", nil
}

// Create creates a batch of the embeddings requests in file fileID, to be
// done within window ("24h").
func (b *BatchAPI) Create(ctx context.Context, fileID, window string, metadata map[string]any) (BatchInfo, error) {
	resp, err := b.o.client.CreateBatch(ctx, openai.CreateBatchRequest{InputFileID: fileID,
		Endpoint: openai.BatchEndpointEmbeddings, CompletionWindow: window, Metadata: metadata})
	if err != nil {
		return BatchInfo{}, b.refuse("create a batch", err)
	}
	return info(resp.Batch), nil
}

// Retrieve returns what the provider says of batch id now.
func (b *BatchAPI) Retrieve(ctx context.Context, id string) (BatchInfo, error) {
	resp, err := b.o.client.RetrieveBatch(ctx, id)
	if err != nil {
		return BatchInfo{}, b.refuse("retrieve batch "+id, err)
	}
	return info(resp.Batch), nil
}

// FindBatch returns the newest batch created from file fileID, if any,
// walking the provider's list (newest first) until it is found or the
// list ends: a run killed between creating a batch and recording its id
// finds it here instead of creating it again.
func (b *BatchAPI) FindBatch(ctx context.Context, fileID string) (BatchInfo, bool, error) {
	limit := 100
	var after *string
	for {
		list, err := b.o.client.ListBatch(ctx, after, &limit)
		if err != nil {
			return BatchInfo{}, false, b.refuse("list batches", err)
		}
		for _, bt := range list.Data {
			if bt.InputFileID == fileID {
				return info(bt), true, nil
			}
		}
		if !list.HasMore || len(list.Data) == 0 {
			return BatchInfo{}, false, nil
		}
		last := list.Data[len(list.Data)-1].ID
		after = &last
	}
}

// Results downloads a finished batch's output and error files. want is the
// number of texts of each custom id the batch was made of: a request whose
// answer has another count of vectors, or a vector the online client would
// refuse (another size than embedder.dimensions, not finite, zero), fails
// that request only. A custom id missing from both files fails too.
func (b *BatchAPI) Results(ctx context.Context, bt BatchInfo, want map[string]int) (BatchResults, error) {
	res := BatchResults{Vectors: map[string][][]float32{}, Failed: map[string]string{}}
	for _, id := range []string{bt.OutputFileID, bt.ErrorFileID} {
		if id == "" {
			continue
		}
		if err := b.readResults(ctx, id, want, &res); err != nil {
			return BatchResults{}, err
		}
	}
	for cid := range want {
		if _, ok := res.Vectors[cid]; !ok && res.Failed[cid] == "" {
			res.Failed[cid] = fmt.Sprintf("no answer in batch %s (%s)", bt.ID, bt.Status)
		}
	}
	return res, nil
}

// resultLine is one line of a batch's output or error file.
type resultLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (b *BatchAPI) readResults(ctx context.Context, fileID string, want map[string]int, res *BatchResults) error {
	raw, err := b.o.client.GetFileContent(ctx, fileID)
	if err != nil {
		return b.refuse("download batch results "+fileID, err)
	}
	defer raw.Close()
	sc := bufio.NewScanner(raw)
	sc.Buffer(nil, 1<<30)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l resultLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("batch results %s: a line is not JSON: %w", fileID, err)
		}
		n, ok := want[l.CustomID]
		if !ok {
			continue // not ours: nothing to apply it to
		}
		switch {
		case l.Error != nil:
			res.Failed[l.CustomID] = l.Error.Code + ": " + l.Error.Message
		case l.Response == nil:
			res.Failed[l.CustomID] = "no response"
		case l.Response.StatusCode != http.StatusOK:
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.Unmarshal(l.Response.Body, &e)
			res.Failed[l.CustomID] = fmt.Sprintf("status %d: %s", l.Response.StatusCode, e.Error.Message)
		default:
			vecs, err := b.decode(l.Response.Body, n)
			if err != nil {
				res.Failed[l.CustomID] = err.Error()
				continue
			}
			res.Vectors[l.CustomID] = vecs
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read batch results %s: %w", fileID, err)
	}
	return nil
}

// decode reads an embeddings answer of n inputs (vectors as JSON numbers
// or base64) and checks it as the online client checks its answers.
func (b *BatchAPI) decode(body json.RawMessage, n int) ([][]float32, error) {
	var resp struct {
		Data []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, &ResponseError{Model: b.o.cfg.Model, Reason: "answer is not an embeddings response: " + err.Error()}
	}
	if len(resp.Data) != n {
		return nil, &ResponseError{Model: b.o.cfg.Model, Reason: fmt.Sprintf("%d vectors for %s", len(resp.Data), inputs(n))}
	}
	out := make([][]float32, n)
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= n || out[d.Index] != nil {
			return nil, &ResponseError{Model: b.o.cfg.Model, Reason: fmt.Sprintf("index %d out of range or repeated", d.Index)}
		}
		v, err := decodeVector(d.Embedding)
		if err != nil {
			return nil, &ResponseError{Model: b.o.cfg.Model, Reason: err.Error()}
		}
		out[d.Index] = v
	}
	if err := b.o.checkSizes(out); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeVector reads a vector sent as JSON numbers or as base64 of
// little-endian float32s.
func decodeVector(raw json.RawMessage) ([]float32, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		buf, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(buf)%4 != 0 {
			return nil, fmt.Errorf("embedding is not base64 of float32s")
		}
		v := make([]float32, len(buf)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("embedding is not a vector: %w", err)
	}
	return v, nil
}

// ErrNoBatchAPI is returned when the server has no Batch API (it answers
// 404 on its routes): most OpenAI-compatible servers do not.
var ErrNoBatchAPI = errors.New("the embedding server has no Batch API (404 on /files or /batches); set embedder.batch.enabled: false (or leave --batch out) to embed online")

// refuse classifies a Batch API error, naming the fix for a server
// without one.
func (b *BatchAPI) refuse(what string, err error) error {
	err = b.o.classify(context.Background(), err)
	var api *APIError
	if errors.As(err, &api) && api.StatusCode == http.StatusNotFound && !isMissingObject(api.Message) {
		return fmt.Errorf("%s: %w (%v)", what, ErrNoBatchAPI, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// isMissingObject tells a 404 for one unknown id (the API exists) from a
// missing route.
func isMissingObject(msg string) bool {
	return strings.Contains(msg, "No such File") || strings.Contains(msg, "No batch found")
}

func info(bt openai.Batch) BatchInfo {
	out := BatchInfo{ID: bt.ID, InputFileID: bt.InputFileID, Status: bt.Status,
		Total: bt.RequestCounts.Total, Completed: bt.RequestCounts.Completed, Failed: bt.RequestCounts.Failed}
	if bt.OutputFileID != nil {
		out.OutputFileID = *bt.OutputFileID
	}
	if bt.ErrorFileID != nil {
		out.ErrorFileID = *bt.ErrorFileID
	}
	if bt.Errors != nil {
		for _, e := range bt.Errors.Data {
			msg := e.Code + ": " + e.Message
			if e.Line != nil {
				msg = fmt.Sprintf("line %d: %s", *e.Line, msg)
			}
			out.Errors = append(out.Errors, msg)
		}
	}
	return out
}
