package fault_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/internal/fault"
)

type marked struct {
	fatal, input, permanent, transient bool
}

func (m marked) Error() string   { return "marked" }
func (m marked) Fatal() bool     { return m.fatal }
func (m marked) Input() bool     { return m.input }
func (m marked) Permanent() bool { return m.permanent }
func (m marked) Transient() bool { return m.transient }

type onlyPermanent struct{ err error }

func (e onlyPermanent) Error() string   { return "permanent: " + e.err.Error() }
func (e onlyPermanent) Unwrap() error   { return e.err }
func (e onlyPermanent) Permanent() bool { return true }

func TestOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want fault.Kind
	}{
		{"nil", nil, fault.Unknown},
		{"plain", errors.New("boom"), fault.Unknown},
		{"fatal wins over every other mark", marked{fatal: true, input: true, permanent: true, transient: true}, fault.Fatal},
		{"input over permanent", marked{input: true, permanent: true}, fault.Input},
		{"permanent over transient", marked{permanent: true, transient: true}, fault.Permanent},
		{"transient", marked{transient: true}, fault.Transient},
		{"a method that says no is no mark", marked{}, fault.Unknown},
		{"wrapped", fmt.Errorf("apply doc 7: %w", marked{transient: true}), fault.Transient},
		{"a fatal cause under a permanent wrapper stops the run", onlyPermanent{marked{fatal: true}}, fault.Fatal},
		{"refused connection", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, fault.Transient},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), fault.Transient},
		{"unexpected EOF", io.ErrUnexpectedEOF, fault.Transient},
		{"postgres restarting", &pgconn.PgError{Code: "57P03"}, fault.Transient},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, fault.Transient},
		{"connection exception class", &pgconn.PgError{Code: "08006"}, fault.Transient},
		{"unique violation is not transient", &pgconn.PgError{Code: "23505"}, fault.Unknown},
		{"cancelled", context.Canceled, fault.Unknown},
		{"deadline", fmt.Errorf("embed: %w", context.DeadlineExceeded), fault.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, fault.Of(tc.err), "%v", tc.err)
		})
	}
}

func TestPredicates(t *testing.T) {
	t.Parallel()
	require.True(t, fault.IsPermanent(marked{input: true}), "an input failure is dead-lettered at once")
	require.True(t, fault.IsPermanent(marked{permanent: true}))
	require.False(t, fault.IsPermanent(marked{transient: true}))
	require.True(t, fault.IsFatal(marked{fatal: true}))
	require.True(t, fault.IsTransient(&pgconn.PgError{Code: "53300"}))
	require.Equal(t, "fatal", fault.Fatal.String())
}

// TestLostAndConnection: Lost is a connection lost under the work or never
// made (what the migrations retry); Connection adds a server that answered
// "not now" (what the index's writes retry). Neither reads cancellation
// as a dependency's failure.
func TestLostAndConnection(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("x: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		name             string
		err              error
		lost, connection bool
	}{
		{"nil", nil, false, false},
		{"database/sql lost its connection", fmt.Errorf("check if table exists: %w; %w", driver.ErrBadConn, sql.ErrConnDone), true, true},
		{"backend terminated", pg("57P01"), true, true},
		{"server shutting down", pg("57P02"), true, true},
		{"server starting", pg("57P03"), true, true},
		{"connection exception class", pg("08006"), true, true},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true, true},
		{"closed", fmt.Errorf("write: %w", net.ErrClosed), true, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true, true},
		{"serialization failure", pg("40001"), false, true},
		{"deadlock", pg("40P01"), false, true},
		{"lock timeout", pg("55P03"), false, true},
		{"too many connections", pg("53300"), false, true},
		{"syntax error is the work's own fault", pg("42601"), false, false},
		{"unique violation", pg("23505"), false, false},
		{"cancelled", context.Canceled, false, false},
		{"cancelled while deadlocked", errors.Join(context.Canceled, &pgconn.PgError{Code: "40P01"}), false, false},
		{"deadline while restarting", errors.Join(context.DeadlineExceeded, &pgconn.PgError{Code: "57P03"}), false, false},
		{"plain", errors.New("other"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.lost, fault.Lost(tc.err), "Lost(%v)", tc.err)
			require.Equal(t, tc.connection, fault.Connection(tc.err), "Connection(%v)", tc.err)
		})
	}
}

// TestReconnectRetriesOnlyEndedSessions: a session the server ended at
// start-up is made again until it succeeds; a refused login or dial returns
// at once; a server that keeps ending sessions is given up on after the
// bound, with its error.
func TestReconnectRetriesOnlyEndedSessions(t *testing.T) {
	ended := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	require.True(t, fault.SessionEnded(fmt.Errorf("connect: %w", ended)))
	require.False(t, fault.SessionEnded(&pgconn.PgError{Code: "28P01"}))
	require.False(t, fault.SessionEnded(syscall.ECONNREFUSED))

	calls := 0
	got, err := fault.Reconnect(context.Background(), time.Minute, func() (int, error) {
		calls++
		if calls < 3 {
			return 0, ended
		}
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, got)
	require.Equal(t, 3, calls)

	for _, refused := range []error{&pgconn.PgError{Code: "28P01"}, syscall.ECONNREFUSED} {
		calls = 0
		_, err = fault.Reconnect(context.Background(), time.Minute, func() (int, error) { calls++; return 0, refused })
		require.ErrorIs(t, err, refused)
		require.Equal(t, 1, calls, "%v is not retried", refused)
	}

	calls = 0
	began := time.Now()
	_, err = fault.Reconnect(context.Background(), 500*time.Millisecond, func() (int, error) { calls++; return 0, ended })
	require.ErrorIs(t, err, ended)
	require.Greater(t, calls, 1)
	require.Less(t, time.Since(began), 5*time.Second, "the bound is kept")
}
