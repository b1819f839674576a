package migrations

import "errors"

// ErrVectorUnavailable means the Postgres server has no pgvector extension
// installed, so CREATE EXTENSION vector cannot succeed.
var ErrVectorUnavailable = errors.New("the pgvector extension is not available on this Postgres server: run `make services` or install pgvector (https://github.com/pgvector/pgvector#installation)")

// ErrBadSchema means a schema name is not a plain lower-case identifier.
var ErrBadSchema = errors.New("schema name must match [a-z_][a-z0-9_]{0,62}")
