package sink

import (
	"context"
	"errors"

	"github.com/ragsync/ragsync/internal/fault"
)

// permanentError marks failures that retrying cannot fix: callers find them
// with errors.As(err, &p) where p is interface{ Permanent() bool }.
type permanentError struct{ msg string }

func (e *permanentError) Error() string   { return e.msg }
func (e *permanentError) Permanent() bool { return true }

var (
	// ErrInvalidConfig wraps every Config problem OpenIndex reports.
	ErrInvalidConfig = errors.New("invalid sink config")
	// ErrIndexMismatch means the index name is registered with another
	// model or dimensions.
	ErrIndexMismatch error = &permanentError{"index registered with another model or dimensions"}
	// ErrInvalidDocument means a Document or its chunks break the rules
	// listed on Document; the change will never apply as it is.
	ErrInvalidDocument error = &permanentError{"invalid document"}
	// ErrMissingVector means a chunk came with a nil Vector and its content
	// hash is not in the embedding cache for this model and size.
	ErrMissingVector error = &permanentError{"no vector for chunk: not given and not in the embedding cache"}
	// ErrFullTextOff means SearchText was called on a store opened with
	// Config.SkipFullText: the index's chunks have no full-text vectors.
	ErrFullTextOff = errors.New("full text is off for this index")
	// ErrOriginGone means a chunk reuses a vector (Chunk.VectorHash) that
	// left the cache after the caller looked (a concurrent Purge). It is
	// transient (Retryable): a retry reads the stored chunks again and
	// embeds the text instead.
	ErrOriginGone = errors.New("reused vector's origin is no longer in the embedding cache")
	// ErrInvalidQuery means a Query or query vector is malformed.
	ErrInvalidQuery error = &permanentError{"invalid query"}
	// ErrNotMigrated means the schema holds no ragsync tables at all
	// (CheckMigrated): nothing was ever indexed there. A schema migrated
	// to an older version is another error.
	ErrNotMigrated = errors.New("schema not migrated")
)

// notMigratedError is CheckMigrated's error for a schema without ragsync
// tables: its message says what to run, and it matches ErrNotMigrated.
type notMigratedError struct{ schema string }

func (e *notMigratedError) Error() string {
	return "schema " + e.schema + " is not migrated: nothing is indexed there yet (run ragsync migrate, or ragsync serve, which migrates; or fix postgres.schema)"
}

func (e *notMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// Retryable reports whether err is a transient failure of the index's
// Postgres after which the same call may succeed: a lost connection or a
// server that said "not now" (fault.Connection: a serialization failure, a
// deadlock, a lock timeout, a shutdown, too many connections, a broken or
// refused connection), or ErrOriginGone. Context cancellation is not
// retryable.
func Retryable(err error) bool {
	if fault.Connection(err) {
		return true
	}
	// Cancellation wins over ErrOriginGone as it does in fault.Connection.
	return errors.Is(err, ErrOriginGone) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
