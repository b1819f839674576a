package service

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/redact"
	"github.com/ragsync/ragsync/pipeline"
)

// redactedDeadLetters masks secrets in the reason of every dead letter
// before the store writes it: a dead letter leaves the process (a Kafka
// topic, a file other tools read), and a provider's error may quote the
// API key or a driver's error a connection string. The message itself is
// kept as consumed, so a replay re-injects what arrived.
type redactedDeadLetters struct {
	next pipeline.DeadLetters
	red  *redact.Redactor
}

func (d redactedDeadLetters) Put(ctx context.Context, m cdc.Record, cause error) error {
	return d.next.Put(ctx, m, d.red.Error(cause))
}

// redactedBody masks secrets in everything a handler writes, so that no
// health endpoint's body can carry one, whatever its handler says.
func redactedBody(red *redact.Redactor, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(redactedResponse{ResponseWriter: w, w: red.Writer(w)}, r)
	})
}

type redactedResponse struct {
	http.ResponseWriter
	w interface{ Write([]byte) (int, error) }
}

func (r redactedResponse) Write(p []byte) (int, error) { return r.w.Write(p) }

// postgresProblem says what is wrong with the index's Postgres in words
// that name no user, password, host or database: /readyz answers anyone
// who can reach the port, and the full error is in the logs.
func postgresProblem(err error) string {
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "unreachable (no answer in time)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "unreachable (connection refused)"
	case errors.As(err, &dnsErr):
		return "unreachable (host name not found)"
	case errors.As(err, &pgErr):
		switch pgErr.Code {
		case "28P01", "28000":
			return "authentication failed"
		case "3D000":
			return "database does not exist"
		case "53300":
			return "too many connections"
		case "57P01", "57P02", "57P03":
			return "shutting down or starting up"
		}
		return "error (SQLSTATE " + pgErr.Code + ")"
	}
	return "unreachable"
}
