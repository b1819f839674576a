// Package fault is ragsync's one error taxonomy. Every stage marks its
// errors by behaviour (a method on the error type), and whoever decides
// what to do with a failure — the pipeline's retry loop, a source, a
// maintenance service, the CLI's exit code — asks Of instead of keeping a
// list of another package's error types. Classification never reads an
// error's text.
//
// It must not know any stage's error types: stages implement the methods
// below, and the dependencies without such methods (the network, Postgres)
// have one classifier each here.
package fault

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Kind is what a failure means for the work that hit it.
type Kind int

const (
	// Unknown failures are retried a bounded number of times, then the
	// work is dead-lettered with the reason.
	Unknown Kind = iota
	// Transient failures mean a dependency is down or busy (a refused
	// connection, a Postgres restart, a provider's 5xx or 429): they are
	// retried without limit, which stops fetching until the dependency is
	// back, so nothing is lost while it is away.
	Transient
	// Permanent failures belong to one piece of work (a row Postgres
	// cannot store, an input the provider refuses): the same work fails
	// the same way every time, so it is dead-lettered at once.
	Permanent
	// Input failures are outside input that cannot be understood (a
	// message that is not Debezium JSON): dead-lettered at once with the
	// original bytes, like Permanent ones.
	Input
	// Fatal failures would hit every piece of work (wrong dimensions, a
	// bad API key, a lost privilege, a dropped table): the run stops with
	// the error, which names the fix, instead of dead-lettering all.
	Fatal
)

func (k Kind) String() string {
	switch k {
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Input:
		return "input"
	case Fatal:
		return "fatal"
	}
	return "unknown"
}

// The methods an error implements to say what it is. Each returns whether
// the error really is of that kind, so a type can decide per value (an
// HTTP error is fatal for 401 and transient for 503).
type (
	fatal     interface{ Fatal() bool }
	input     interface{ Input() bool }
	permanent interface{ Permanent() bool }
	transient interface{ Transient() bool }
)

// Of classifies err. A method the error chain implements wins, in the
// order Fatal, Input, Permanent, Transient (a fatal error wrapped in a
// permanent one still stops the run); then Postgres's and the network's
// own errors; anything else, and a cancelled or expired context, is
// Unknown: cancellation is the caller's decision, not the dependency's.
func Of(err error) Kind {
	if err == nil {
		return Unknown
	}
	var f fatal
	if errors.As(err, &f) && f.Fatal() {
		return Fatal
	}
	var in input
	if errors.As(err, &in) && in.Input() {
		return Input
	}
	var p permanent
	if errors.As(err, &p) && p.Permanent() {
		return Permanent
	}
	var t transient
	if errors.As(err, &t) && t.Transient() {
		return Transient
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Unknown
	}
	if Connection(err) {
		return Transient
	}
	return Unknown
}

// IsTransient, IsPermanent and IsFatal are Of(err) == that kind; an Input
// failure counts as permanent (it is dead-lettered at once too).
func IsTransient(err error) bool { return Of(err) == Transient }

// IsPermanent reports a failure that retrying cannot fix: Permanent or Input.
func IsPermanent(err error) bool { k := Of(err); return k == Permanent || k == Input }

// IsFatal reports a failure every piece of work would hit.
func IsFatal(err error) bool { return Of(err) == Fatal }

// Connection reports whether err means the connection to a dependency was
// lost or never made (Lost), or the server said "not now", so that the same
// call may succeed later: Postgres reports a serialization failure (40001),
// a deadlock (40P01), a lock timeout (55P03) or too many connections
// (53300). A cancelled context is not a lost connection.
func Connection(err error) bool {
	if Lost(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "53300":
			return true
		}
	}
	return false
}

// SessionEnded reports an error the server sent as it ended a session it
// had accepted, possibly while the session was still being set up: an
// administrator's pg_terminate_backend, a crash shutdown, a server still
// starting (57P01–57P03). The server is there, so a new connection can
// succeed, unlike a refused dial or refused credentials, which a start-up
// reports at once with their fix.
func SessionEnded(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// Reconnect calls connect again, with backoff, while it fails with
// SessionEnded and for at most within (see Retry). A connection made at
// start-up goes through it, so that a backend terminated as it started
// does not stop the service, while a refused dial or login is reported at
// once with its fix.
func Reconnect[C any](ctx context.Context, within time.Duration, connect func() (C, error)) (C, error) {
	return Retry(ctx, within, SessionEnded, connect)
}

// Retry calls try until it succeeds or fails with an error retryable does
// not accept, waiting 100 ms after the first failure and twice as long
// after each next one (at most 5 s), for at most within. The last result
// is returned as it is, also when ctx ends during a wait.
func Retry[C any](ctx context.Context, within time.Duration, retryable func(error) bool, try func() (C, error)) (C, error) {
	start, wait := time.Now(), 100*time.Millisecond
	for {
		c, err := try()
		if err == nil || !retryable(err) || time.Since(start)+wait > within {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Lost reports whether err means the connection was lost under the work,
// or never made, rather than that the work is wrong: pgx says nothing
// reached the server; Postgres terminated the backend or is shutting down
// or starting (57P01–57P03), or reports a connection exception (class 08);
// a socket was reset, refused or closed; database/sql (used by the
// migrations) lost its connection. Work that is safe to repeat can simply
// be tried again. Unlike Connection, a server that answered "not now" (a
// deadlock, a lock timeout, too many connections) is not a lost
// connection. A cancelled context is neither.
func Lost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	if SessionEnded(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		// database/sql reports a connection the server closed under it
		// as these.
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone)
}
