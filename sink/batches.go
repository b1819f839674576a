package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// BatchStatusApplied is the status of a recorded batch whose vectors are in
// the embedding cache.
const BatchStatusApplied = "applied"

// Batch statuses before the provider names one.
const (
	BatchStatusUploading = "uploading" // the row exists, the file may not
	BatchStatusUploaded  = "uploaded"  // InputFileID is set, no batch yet
)

// BatchRecord is one batch of the batch lane (table embedding_batches).
type BatchRecord struct {
	ID          int64
	FileName    string
	InputFileID string // "" until the file is uploaded
	BatchID     string // "" until the batch is created
	Status      string
	// Hashes are the texts' content hashes in file order; LineInputs[k]
	// is the number of texts of line k.
	Hashes       []string
	LineInputs   []int
	Inputs       int
	Tokens       int64
	FailedInputs int
	CreatedAt    time.Time
	AppliedAt    *time.Time
}

// Batches records the batch lane's batches of one index, model and
// dimensions. It does not own the pool; safe for concurrent use.
type Batches struct {
	pool       *pgxpool.Pool
	table      string
	index      string
	model      string
	dimensions int
}

// NewBatches returns the batch records of index (embedded by model at
// dimensions) in schema.
func NewBatches(pool *pgxpool.Pool, schema, index, model string, dimensions int) *Batches {
	return &Batches{pool: pool, table: pgx.Identifier{schema, "embedding_batches"}.Sanitize(),
		index: index, model: model, dimensions: dimensions}
}

const batchColumns = "id, file_name, coalesce(input_file_id, ''), coalesce(batch_id, ''), status, hashes, line_inputs, inputs, tokens, failed_inputs, created_at, applied_at"

func scanBatch(row pgx.CollectableRow) (BatchRecord, error) {
	var r BatchRecord
	err := row.Scan(&r.ID, &r.FileName, &r.InputFileID, &r.BatchID, &r.Status, &r.Hashes, &r.LineInputs,
		&r.Inputs, &r.Tokens, &r.FailedInputs, &r.CreatedAt, &r.AppliedAt)
	return r, err
}

// Open returns the batches not yet handled (applied_at unset), oldest
// first.
func (b *Batches) Open(ctx context.Context) ([]BatchRecord, error) {
	return b.list(ctx, " AND applied_at IS NULL")
}

// All returns every recorded batch, oldest first.
func (b *Batches) All(ctx context.Context) ([]BatchRecord, error) { return b.list(ctx, "") }

func (b *Batches) list(ctx context.Context, cond string) ([]BatchRecord, error) {
	rows, err := b.pool.Query(ctx, "SELECT "+batchColumns+" FROM "+b.table+
		" WHERE index_name = $1 AND model = $2 AND dimensions = $3"+cond+" ORDER BY id", b.index, b.model, b.dimensions)
	if err != nil {
		return nil, fmt.Errorf("read the batch lane's batches: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("read the batch lane's batches: %w", err)
	}
	return out, nil
}

// Add records a batch about to be uploaded (status uploading) and returns
// it with its id. r.FileName must be unique.
func (b *Batches) Add(ctx context.Context, r BatchRecord) (BatchRecord, error) {
	r.Status = BatchStatusUploading
	err := b.pool.QueryRow(ctx, "INSERT INTO "+b.table+" (index_name, model, dimensions, file_name, status, hashes, line_inputs, inputs, tokens)"+
		" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id, created_at",
		b.index, b.model, b.dimensions, r.FileName, r.Status, r.Hashes, r.LineInputs, r.Inputs, r.Tokens).Scan(&r.ID, &r.CreatedAt)
	if err != nil {
		return BatchRecord{}, fmt.Errorf("record batch file %s: %w", r.FileName, err)
	}
	return r, nil
}

// SetFile records the uploaded file's id.
func (b *Batches) SetFile(ctx context.Context, id int64, fileID string) error {
	return b.exec(ctx, "set the input file of", id, "UPDATE "+b.table+" SET input_file_id = $2, status = $3 WHERE id = $1", id, fileID, BatchStatusUploaded)
}

// SetBatch records the created batch's id and status.
func (b *Batches) SetBatch(ctx context.Context, id int64, batchID, status string) error {
	return b.exec(ctx, "set the batch id of", id, "UPDATE "+b.table+" SET batch_id = $2, status = $3, submitted_at = coalesce(submitted_at, now()) WHERE id = $1", id, batchID, status)
}

// SetStatus records the provider's latest status of a batch.
func (b *Batches) SetStatus(ctx context.Context, id int64, status string) error {
	return b.exec(ctx, "set the status of", id, "UPDATE "+b.table+" SET status = $2 WHERE id = $1 AND status <> $2", id, status)
}

// Close records a batch as handled: status (applied, or the provider's
// failed, expired or cancelled) and the inputs it did not give vectors for.
func (b *Batches) Close(ctx context.Context, id int64, status string, failedInputs int) error {
	return b.exec(ctx, "close", id, "UPDATE "+b.table+" SET status = $2, failed_inputs = $3, applied_at = now() WHERE id = $1", id, status, failedInputs)
}

func (b *Batches) exec(ctx context.Context, what string, id int64, sql string, args ...any) error {
	if _, err := b.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s recorded batch %d: %w", what, id, err)
	}
	return nil
}
