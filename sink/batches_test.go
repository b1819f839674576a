package sink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/sink"
)

// TestBatchesRecordEachStep: a batch is recorded before its upload, then
// gains its file id, its batch id and statuses, and leaves the open list
// once closed; records are per index, model and dimensions.
func TestBatchesRecordEachStep(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := t.Context()
	rec := sink.NewBatches(b.pool, b.schema, "articles", "test-model", dims)
	other := sink.NewBatches(b.pool, b.schema, "articles", "other-model", dims)

	r, err := rec.Add(ctx, sink.BatchRecord{FileName: "f1.jsonl", Hashes: []string{"h1", "h2", "h3"}, LineInputs: []int{2, 1}, Inputs: 3, Tokens: 12})
	require.NoError(t, err)
	require.Equal(t, sink.BatchStatusUploading, r.Status)
	_, err = rec.Add(ctx, sink.BatchRecord{FileName: "f1.jsonl", Hashes: []string{"h4"}, LineInputs: []int{1}, Inputs: 1})
	require.ErrorContains(t, err, "f1.jsonl", "a file name is recorded once")

	require.NoError(t, rec.SetFile(ctx, r.ID, "file-1"))
	open, err := rec.Open(ctx)
	require.NoError(t, err)
	require.Len(t, open, 1)
	require.Equal(t, "file-1", open[0].InputFileID)
	require.Equal(t, sink.BatchStatusUploaded, open[0].Status)
	require.Empty(t, open[0].BatchID)
	require.Equal(t, []string{"h1", "h2", "h3"}, open[0].Hashes)
	require.Equal(t, []int{2, 1}, open[0].LineInputs)
	require.EqualValues(t, 12, open[0].Tokens)

	require.NoError(t, rec.SetBatch(ctx, r.ID, "batch_1", "validating"))
	require.NoError(t, rec.SetStatus(ctx, r.ID, "in_progress"))
	open, err = rec.Open(ctx)
	require.NoError(t, err)
	require.Equal(t, "batch_1", open[0].BatchID)
	require.Equal(t, "in_progress", open[0].Status)
	none, err := other.Open(ctx)
	require.NoError(t, err)
	require.Empty(t, none, "another model's records are not this one's")

	require.NoError(t, rec.Close(ctx, r.ID, sink.BatchStatusApplied, 1))
	open, err = rec.Open(ctx)
	require.NoError(t, err)
	require.Empty(t, open)
	all, err := rec.All(ctx)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, sink.BatchStatusApplied, all[0].Status)
	require.Equal(t, 1, all[0].FailedInputs)
	require.NotNil(t, all[0].AppliedAt)
}
