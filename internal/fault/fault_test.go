package fault_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

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
