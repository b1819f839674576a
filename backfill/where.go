package backfill

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// checkWhereText makes sure a --where condition stays inside the
// parentheses the queries put around it: every ")" closes a "(" of the
// condition itself, every "(" is closed, and there is no ";" or comment
// that could end the statement or hide the rest of it. Quoted strings,
// quoted identifiers and dollar-quoted strings are skipped as Postgres's
// lexer skips them. Without this, "x) OR (true" would turn the page
// query's keyset condition into "(keys) > (last) AND (x) OR (true)" and
// read the same page for ever.
func checkWhereText(where string) error {
	depth := 0
	for i := 0; i < len(where); i++ {
		switch c := where[i]; {
		case c == '\'' || c == '"':
			// '' (or "") inside is an escaped quote: the loop closes and
			// reopens, which is the same. E'...' strings may escape with a
			// backslash.
			escapes := c == '\'' && i > 0 && (where[i-1] == 'e' || where[i-1] == 'E')
			j := i + 1
			for ; j < len(where) && where[j] != c; j++ {
				if escapes && where[j] == '\\' {
					j++
				}
			}
			if j >= len(where) {
				return fmt.Errorf("an unterminated %c starts at byte %d", c, i)
			}
			i = j
		case c == '$' && (i == 0 || !isIdentChar(where[i-1])):
			// $tag$ ... $tag$; a bare $1 is a parameter, refused when the
			// condition is prepared.
			end := strings.IndexByte(where[i+1:], '$')
			if end < 0 {
				continue
			}
			tag := where[i : i+end+2]
			if !validDollarTag(tag) {
				continue
			}
			close := strings.Index(where[i+len(tag):], tag)
			if close < 0 {
				return fmt.Errorf("an unterminated %s string starts at byte %d", tag, i)
			}
			i += len(tag) + close + len(tag) - 1
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return fmt.Errorf("the \")\" at byte %d closes a parenthesis the condition did not open", i)
			}
		case c == ';':
			return fmt.Errorf("it contains \";\" at byte %d", i)
		case c == '-' && i+1 < len(where) && where[i+1] == '-', c == '/' && i+1 < len(where) && where[i+1] == '*':
			return fmt.Errorf("it contains a comment (%q at byte %d), which could hide the rest of the query", where[i:i+2], i)
		}
	}
	if depth > 0 {
		return fmt.Errorf("%d \"(\" are never closed", depth)
	}
	return nil
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validDollarTag is "$$" or "$name$" with name an identifier not starting
// with a digit.
func validDollarTag(tag string) bool {
	name := tag[1 : len(tag)-1]
	if name == "" {
		return true
	}
	if name[0] >= '0' && name[0] <= '9' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isIdentChar(name[i]) {
			return false
		}
	}
	return true
}

// checkWhere checks t.Where up front: text that stays in its parentheses
// (checkWhereText), then, prepared parenthesised over the table in a
// read-only transaction that is rolled back, one expression of type
// boolean with no parameters. Preparing plans without running, so the
// condition's functions are not called.
func (s *Source) checkWhere(ctx context.Context, t *table) error {
	if t.Where == "" {
		return nil
	}
	bad := func(err error) error {
		return fmt.Errorf("backfill table %s: --where %q: %w: it must be one boolean expression over the table's columns, e.g. \"t.updated_at > now() - interval '30 days'\"", t.Name, t.Where, err)
	}
	if err := checkWhereText(t.Where); err != nil {
		return bad(err)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("backfill table %s: check --where: %w", t.Name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	sd, err := tx.Conn().Prepare(ctx, "", "SELECT ("+t.Where+") FROM "+t.ident+" t LIMIT 0")
	if err != nil {
		return bad(err)
	}
	switch {
	case len(sd.ParamOIDs) > 0:
		return bad(errors.New("it has parameters ($1…); write the values in"))
	case len(sd.Fields) != 1:
		return bad(fmt.Errorf("it is %d expressions", len(sd.Fields)))
	case sd.Fields[0].DataTypeOID != pgtype.BoolOID:
		typ := fmt.Sprintf("OID %d", sd.Fields[0].DataTypeOID)
		if dt, ok := tx.Conn().TypeMap().TypeForOID(sd.Fields[0].DataTypeOID); ok {
			typ = dt.Name
		}
		return bad(fmt.Errorf("it is of type %s, not boolean", typ))
	}
	return nil
}
