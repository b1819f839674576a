package sink

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// permanentError marks failures that retrying cannot fix: callers find them
// with errors.As(err, &p) where p is interface{ Permanent() bool }.
type permanentError struct{ msg string }

func (e *permanentError) Error() string   { return e.msg }
func (e *permanentError) Permanent() bool { return true }

var (
	// ErrInvalidConfig wraps every Config problem New reports.
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
)

// Retryable reports whether err is a transient Postgres failure after which
// the same call may succeed: pgx says nothing reached the server, a
// serialization failure (40001), a deadlock (40P01), a lock timeout
// (55P03), a server shutting down or out of connections, or a broken or
// refused connection. Context cancellation is not retryable.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrOriginGone) {
		return true
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03",
			"57P01", "57P02", "57P03", // admin/crash shutdown, cannot connect now
			"53300": // too many connections
			return true
		}
		// Class 08: connection exceptions.
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}
