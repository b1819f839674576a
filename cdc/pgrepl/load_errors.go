package pgrepl

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// classifyLoad names the fix for a read the server refused. Callers say
// which read it was ("read <table>: ").
func (s *Source) classifyLoad(err error, t *tableInfo) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return &SourceError{msg: fmt.Sprintf("the source refused it (%s): run GRANT SELECT ON %s TO <role of source.postgres.url>, then start serve again, which resumes the load", pe.Message, t.sql())}
	}
	return err
}
