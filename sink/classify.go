package sink

import (
	"errors"
	"fmt"
)

// FatalError is a Postgres failure that every later write would hit too —
// a lost privilege, a dropped table, a read-only server — so the pipeline
// must stop (offsets uncommitted) instead of dead-lettering message after
// message. Fix says what the operator should do.
type FatalError struct {
	Err error
	Fix string
}

func (e *FatalError) Error() string { return fmt.Sprintf("%v (%s)", e.Err, e.Fix) }
func (e *FatalError) Unwrap() error { return e.Err }

// Fatal is true: callers ask with errors.As(err, &f) where f is
// interface{ Fatal() bool }, or with sink.Fatal.
func (e *FatalError) Fatal() bool { return true }

// DataError is a Postgres failure caused by the row itself (SQLSTATE class
// 22 data exception, a NOT NULL or CHECK violation, a value over a size
// limit): the same row fails the same way every time, so it is permanent
// and is dead-lettered at once, without retries.
type DataError struct{ Err error }

func (e *DataError) Error() string {
	return fmt.Sprintf("%v (the row's data cannot be stored in Postgres; not retried)", e.Err)
}
func (e *DataError) Unwrap() error { return e.Err }

// Permanent is true: no retry can fix the row.
func (e *DataError) Permanent() bool { return true }

// Fatal reports whether err is a FatalError: a failure of the index's
// Postgres that no message can get past.
func Fatal(err error) bool {
	var f *FatalError
	return errors.As(err, &f)
}

// classify turns the Postgres errors whose handling differs from "retry,
// then dead-letter" into a FatalError (with the fix for schema) or a
// DataError; others pass unchanged. It is applied once, where a Store
// method returns, and leaves classified errors alone.
func classify(err error, schema string) error {
	if err == nil {
		return nil
	}
	var f *FatalError
	var d *DataError
	if errors.As(err, &f) || errors.As(err, &d) {
		return err
	}
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) {
		return err
	}
	switch code := pgErr.SQLState(); {
	case code == "42501": // insufficient_privilege
		return &FatalError{err, fmt.Sprintf("the role in postgres.url lost a privilege on schema %s: "+
			"GRANT USAGE ON SCHEMA %s and SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %s to it, then restart", schema, schema, schema)}
	case code == "42P01" || code == "3F000": // undefined_table, invalid_schema_name
		return &FatalError{err, fmt.Sprintf("schema %s is not migrated or its tables were dropped: run `ragsync migrate`, then restart", schema)}
	case code == "42703" || code == "42883" || code == "42704": // undefined column, function, object
		return &FatalError{err, fmt.Sprintf("schema %s does not match this ragsync version or pgvector is missing: run `ragsync migrate`, then restart", schema)}
	case code == "25006": // read_only_sql_transaction
		return &FatalError{err, "postgres.url points at a read-only server (a standby, or default_transaction_read_only is on): point it at the primary, then restart"}
	case code == "53100": // disk_full: transient, retried until space is freed
		return err
	case len(code) == 5 && code[:2] == "22", // data exception: bad encoding, NUL, out of range, too long
		code == "23502", code == "23514", // not null, check violation
		code == "54000": // program_limit_exceeded: index row or value too large
		return &DataError{err}
	}
	return err
}
