package openaitest_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/openaitest"
)

// batchLine is one line of an input file.
func batchLine(id string, texts ...string) openai.BatchLineItem {
	return openai.BatchEmbeddingRequest{CustomID: id, Method: http.MethodPost, URL: openai.BatchEndpointEmbeddings,
		Body: openai.EmbeddingRequest{Input: texts, Model: "m", Dimensions: 8}}
}

type rawLine string

func (l rawLine) MarshalBatchLineItem() []byte { return []byte(l) }

// submit uploads lines and creates their batch.
func submit(t *testing.T, c *openai.Client, lines ...openai.BatchLineItem) openai.BatchResponse {
	t.Helper()
	f, err := c.UploadBatchFile(t.Context(), openai.UploadBatchFileRequest{FileName: "in.jsonl", Lines: lines})
	require.NoError(t, err)
	b, err := c.CreateBatch(t.Context(), openai.CreateBatchRequest{InputFileID: f.ID, Endpoint: openai.BatchEndpointEmbeddings})
	require.NoError(t, err)
	return b
}

type outLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int `json:"status_code"`
		Body       struct {
			Data []struct {
				Index     int       `json:"index"`
				Embedding []float32 `json:"embedding"`
			} `json:"data"`
		} `json:"body"`
	} `json:"response"`
	Error *struct {
		Code string `json:"code"`
	} `json:"error"`
}

func content(t *testing.T, c *openai.Client, id string) []outLine {
	t.Helper()
	raw, err := c.GetFileContent(t.Context(), id)
	require.NoError(t, err)
	defer raw.Close()
	b, err := io.ReadAll(raw)
	require.NoError(t, err)
	var out []outLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var o outLine
		require.NoError(t, json.Unmarshal([]byte(l), &o))
		out = append(out, o)
	}
	return out
}

func TestBatchAPICompletesLikeOnline(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Batch: openaitest.BatchOptions{Processing: 400 * time.Millisecond}})
	c := client(s, "")
	b := submit(t, c, batchLine("a", "first text", "second text"), batchLine("b", "third"), batchLine("c", "fourth"))
	require.Equal(t, "validating", b.Status)
	var seen []string
	for b.Status != "completed" {
		time.Sleep(20 * time.Millisecond)
		var err error
		b, err = c.RetrieveBatch(t.Context(), b.ID)
		require.NoError(t, err)
		if len(seen) == 0 || seen[len(seen)-1] != b.Status {
			seen = append(seen, b.Status)
		}
	}
	require.Equal(t, []string{"validating", "in_progress", "finalizing", "completed"}, seen)
	require.Equal(t, openai.BatchRequestCounts{Total: 3, Completed: 3}, b.RequestCounts)
	require.Nil(t, b.ErrorFileID)
	require.NotNil(t, b.OutputFileID)
	lines := content(t, c, *b.OutputFileID)
	var order []string
	for _, l := range lines {
		order = append(order, l.CustomID)
	}
	require.Equal(t, []string{"c", "b", "a"}, order, "not the input's order")
	want, err := embedder.NewHashing(8).Embed(t.Context(), []string{"first text", "second text"})
	require.NoError(t, err)
	a := lines[2].Response
	require.Equal(t, 200, a.StatusCode)
	require.Len(t, a.Body.Data, 2)
	require.Equal(t, want[1], a.Body.Data[1].Embedding, "the online endpoint's vectors")
	// The online endpoint answers the same vector.
	online, err := c.CreateEmbeddings(t.Context(), openai.EmbeddingRequestStrings{Input: []string{"second text"}, Model: "m", Dimensions: 8})
	require.NoError(t, err)
	require.Equal(t, online.Data[0].Embedding, a.Body.Data[1].Embedding)
	require.Equal(t, int64(1), s.Requests.Load(), "Requests counts embeddings requests only")

	counts := s.BatchCounts()
	require.Equal(t, 1, counts.FilesUploaded)
	require.Equal(t, 1, counts.BatchesCreated)
	require.Equal(t, []string{b.InputFileID}, counts.BatchInputFiles)
}

func TestBatchAPIValidates(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Batch: openaitest.BatchOptions{MaxLines: 3}})
	c := client(s, "")
	for _, tc := range []struct {
		name  string
		lines []openai.BatchLineItem
		code  string
	}{
		{"duplicate custom_id", []openai.BatchLineItem{batchLine("a", "x"), batchLine("a", "y")}, "duplicate_custom_id"},
		{"bad JSONL line", []openai.BatchLineItem{batchLine("a", "x"), rawLine("{not json")}, "invalid_json_line"},
		{"wrong url", []openai.BatchLineItem{rawLine(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}`)}, "mismatched_endpoint"},
		{"wrong method", []openai.BatchLineItem{rawLine(`{"custom_id":"a","method":"GET","url":"/v1/embeddings","body":{}}`)}, "invalid_method"},
		{"too many lines", []openai.BatchLineItem{batchLine("a", "x"), batchLine("b", "x"), batchLine("c", "x"), batchLine("d", "x")}, "too_many_requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := submit(t, c, tc.lines...)
			b, err := c.RetrieveBatch(t.Context(), b.ID)
			require.NoError(t, err)
			require.Equal(t, "failed", b.Status)
			require.NotNil(t, b.Errors)
			require.Equal(t, tc.code, b.Errors.Data[0].Code)
			require.Nil(t, b.OutputFileID)
		})
	}

	// The request itself is refused at once.
	f, err := c.UploadBatchFile(t.Context(), openai.UploadBatchFileRequest{Lines: []openai.BatchLineItem{batchLine("a", "x")}})
	require.NoError(t, err)
	_, err = c.CreateBatch(t.Context(), openai.CreateBatchRequest{InputFileID: f.ID, Endpoint: "/v1/moderations"})
	requireStatus(t, err, 400, "endpoint")
	_, err = c.CreateBatch(t.Context(), openai.CreateBatchRequest{InputFileID: "file-nope", Endpoint: openai.BatchEndpointEmbeddings})
	requireStatus(t, err, 400, "No such File")
	_, err = c.CreateBatch(t.Context(), openai.CreateBatchRequest{InputFileID: f.ID, Endpoint: openai.BatchEndpointEmbeddings, CompletionWindow: "1h"})
	requireStatus(t, err, 400, "completion_window")
	_, err = c.CreateFileBytes(t.Context(), openai.FileBytesRequest{Name: "x.jsonl", Bytes: []byte("{}"), Purpose: "nonsense"})
	requireStatus(t, err, 400, "purpose")
	_, err = c.RetrieveBatch(t.Context(), "batch_nope")
	requireStatus(t, err, 404, "No batch found")
}

func requireStatus(t *testing.T, err error, status int, msg string) {
	t.Helper()
	var api *openai.APIError
	require.True(t, errors.As(err, &api), "%v", err)
	require.Equal(t, status, api.HTTPStatusCode)
	require.Contains(t, api.Message, msg)
}

func TestBatchAPIFaults(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Models: []string{"m"}})
	c := client(s, "")
	s.SetBatchHook(func(n int, ids []string) openaitest.BatchFault {
		switch n {
		case 0:
			return openaitest.BatchFault{FailLines: ids[1:2]}
		case 1:
			return openaitest.BatchFault{Expire: true}
		case 2:
			return openaitest.BatchFault{Fail: true}
		}
		return openaitest.BatchFault{}
	})
	// A failing line, and one refused as the online endpoint would.
	unknown := rawLine(`{"custom_id":"c","method":"POST","url":"/v1/embeddings","body":{"model":"other","input":["x"]}}`)
	b := submit(t, c, batchLine("a", "x"), batchLine("b", "y"), unknown)
	b, err := c.RetrieveBatch(t.Context(), b.ID)
	require.NoError(t, err)
	require.Equal(t, "completed", b.Status)
	require.Equal(t, openai.BatchRequestCounts{Total: 3, Completed: 1, Failed: 2}, b.RequestCounts)
	require.Equal(t, "a", content(t, c, *b.OutputFileID)[0].CustomID)
	failed := map[string]int{}
	for _, l := range content(t, c, *b.ErrorFileID) {
		failed[l.CustomID] = l.Response.StatusCode
	}
	require.Equal(t, map[string]int{"b": 500, "c": 404}, failed)

	b = submit(t, c, batchLine("a", "x"))
	b, err = c.RetrieveBatch(t.Context(), b.ID)
	require.NoError(t, err)
	require.Equal(t, "expired", b.Status)
	require.Nil(t, b.OutputFileID)
	require.Equal(t, "batch_expired", content(t, c, *b.ErrorFileID)[0].Error.Code)

	b = submit(t, c, batchLine("a", "x"))
	b, err = c.RetrieveBatch(t.Context(), b.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", b.Status)

	b = submit(t, c, batchLine("a", "x"))
	b, err = c.CancelBatch(t.Context(), b.ID)
	require.NoError(t, err)
	require.Equal(t, "completed", b.Status, "Processing 0: done before the cancel")
}

func TestBatchAPIListsNewestFirst(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Batch: openaitest.BatchOptions{Processing: time.Hour}})
	c := client(s, "")
	var ids []string
	for range 5 {
		ids = append(ids, submit(t, c, batchLine("a", "x")).ID)
	}
	limit := 2
	var got []string
	var after *string
	for {
		list, err := c.ListBatch(t.Context(), after, &limit)
		require.NoError(t, err)
		for _, b := range list.Data {
			got = append(got, b.ID)
		}
		if !list.HasMore {
			break
		}
		after = &list.LastID
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)
	b, err := c.CancelBatch(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, "cancelled", b.Status)
	files, err := c.ListFiles(t.Context())
	require.NoError(t, err)
	require.Len(t, files.Files, 5)
}

func TestBatchAPIDisabledIs404(t *testing.T) {
	t.Parallel()
	s := openaitest.New(t, openaitest.Options{Batch: openaitest.BatchOptions{Disabled: true}})
	_, err := client(s, "").UploadBatchFile(t.Context(), openai.UploadBatchFileRequest{Lines: []openai.BatchLineItem{batchLine("a", "x")}})
	requireStatus(t, err, 404, "no route")
	_, err = client(s, "").ListBatch(t.Context(), nil, nil)
	requireStatus(t, err, 404, "no route")
	require.Zero(t, s.BatchCounts().FilesUploaded)
}
