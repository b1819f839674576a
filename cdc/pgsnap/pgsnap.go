// Package pgsnap reads rows of Postgres tables as the values and document
// keys of cdc.Change: in key-ordered pages inside a snapshot (a transaction
// the caller opened, or one that imports an exported snapshot), whole
// through a cursor when a table has no key to page by, or one row by its
// document id. Every reader of table rows outside the replication stream
// (the Postgres source's initial load and its re-read of a row for
// unchanged TOAST values, and the backfill) reads through it, so a row
// becomes the same After, DocKey and Key whichever of them read it, and the
// same as the stream's and Debezium's events of it (cdc.PostgresValue,
// cdc.RowKey).
//
// Values are read in Postgres' text format, on a session with the settings
// of cdc.PostgresSessionParams; the caller opens the connection with them.
// pgsnap returns the server's errors as they are, for the caller to name
// the read and the fix.
package pgsnap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ragsync/ragsync/cdc"
)

// Table is one table to read.
type Table struct {
	// Schema and Name are the table's names as the catalog spells them
	// (unquoted).
	Schema, Name string
	// Keys are the columns pages are ordered by and resume after: the
	// primary key, or unique not-null columns. Without keys a table is
	// only read whole, through a cursor.
	Keys []string
	// KeyTypes, when set, are the types of Keys (format_type): a resumed
	// page's key texts are then cast to them ($n::text::type). Without
	// them the texts go as untyped parameters, which the server reads as
	// the columns' types.
	KeyTypes []string
	// IDs are the document id columns: a row's DocKey and Key are built
	// from them (cdc.RowKey).
	IDs []string
	// Where, when set, is a boolean SQL expression the rows must satisfy,
	// over the table aliased t.
	Where string
	// RowVersions reads each row's xmin and xmax too (Row.XMin, Row.XMax).
	RowVersions bool
}

// Ident is the table's name quoted for SQL.
func (t Table) Ident() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// Change is the table's name as cdc.Change.Table spells it.
func (t Table) Change() string { return cdc.TableName(t.Schema, t.Name) }

// Row is one row read.
type Row struct {
	// DocKey and Key are the row's document id (cdc.RowKey over the
	// table's IDs); DocKey is "" when an id column is null (or the only
	// one is empty): the row is no document.
	DocKey string
	Key    map[string]any
	// After is every column, decoded as cdc.PostgresValue decodes it.
	After map[string]any
	// KeyText is the key columns' values as text, in Keys order: where
	// the next page starts.
	KeyText []string
	// XMin and XMax are the row version's system columns as text, with
	// Table.RowVersions.
	XMin, XMax string
}

// Begin opens a read-only REPEATABLE READ transaction on conn: on the
// exported snapshot named snapshot when it is not empty, else on the
// snapshot its first statement takes.
func Begin(ctx context.Context, conn interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, snapshot string) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	if snapshot != "" {
		// SET TRANSACTION takes no parameter; the literal is quoted.
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
			_ = tx.Rollback(ctx)
			return nil, fmt.Errorf("import snapshot %s: %w", snapshot, err)
		}
	}
	return tx, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Page reads, on conn (inside the caller's transaction), at most limit
// rows of t in key order after the key texts after (nil: from the start).
// It returns every row read, those that are no document too (DocKey ""),
// and none once the table is read.
func (t Table) Page(ctx context.Context, conn *pgconn.PgConn, after []string, limit int) ([]Row, error) {
	if len(t.Keys) == 0 {
		return nil, fmt.Errorf("read %s in pages: the table has no key columns to page by", t.Ident())
	}
	if after != nil && len(after) != len(t.Keys) {
		return nil, fmt.Errorf("read %s after key %q: want %d key values", t.Ident(), after, len(t.Keys))
	}
	cols := make([]string, len(t.Keys))
	for i, k := range t.Keys {
		cols[i] = "t." + pgx.Identifier{k}.Sanitize()
	}
	keyList := strings.Join(cols, ", ")
	var conds []string
	var args [][]byte
	if after != nil {
		ps := make([]string, len(after))
		for i, a := range after {
			ps[i] = fmt.Sprintf("$%d", i+1)
			if t.KeyTypes != nil {
				ps[i] += "::text::" + t.KeyTypes[i]
			}
			args = append(args, []byte(a))
		}
		conds = append(conds, "("+keyList+") > ("+strings.Join(ps, ", ")+")")
	}
	if t.Where != "" {
		conds = append(conds, "("+t.Where+")")
	}
	sql := t.selectList() + " FROM " + t.Ident() + " t"
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	sql += fmt.Sprintf(" ORDER BY %s LIMIT %d", keyList, limit)
	return t.read(ctx, conn, sql, args, true)
}

// selectList reads the row versions when asked, the key columns as text
// (where the next page starts), and every column.
func (t Table) selectList() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	if t.RowVersions {
		b.WriteString("t.xmin::text, t.xmax::text, ")
	}
	for _, k := range t.Keys {
		b.WriteString("t." + pgx.Identifier{k}.Sanitize() + "::text, ")
	}
	b.WriteString("t.*")
	return b.String()
}

// read runs sql (text results) and decodes its rows; keyed says the
// select list starts with the row versions (if asked) and the key texts.
func (t Table) read(ctx context.Context, conn *pgconn.PgConn, sql string, args [][]byte, keyed bool) ([]Row, error) {
	rr := conn.ExecParams(ctx, sql, args, nil, nil, nil)
	fds := rr.FieldDescriptions()
	fixed := 0
	if keyed {
		fixed = len(t.Keys)
		if t.RowVersions {
			fixed += 2
		}
	}
	var rows []Row
	for rr.NextRow() {
		vals := rr.Values()
		var r Row
		at := 0
		if keyed && t.RowVersions {
			r.XMin, r.XMax = string(vals[0]), string(vals[1])
			at = 2
		}
		if keyed {
			r.KeyText = make([]string, len(t.Keys))
			for i := range r.KeyText {
				r.KeyText[i] = string(vals[at+i])
			}
		}
		r.After = decode(fds[fixed:], vals[fixed:])
		r.DocKey, r.Key = docKey(t.IDs, r.After)
		rows = append(rows, r)
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	return rows, nil
}

// decode is the one place a row read from a table becomes values.
func decode(fds []pgconn.FieldDescription, vals [][]byte) map[string]any {
	row := make(map[string]any, len(vals))
	for i, raw := range vals {
		if raw == nil {
			row[fds[i].Name] = nil
			continue
		}
		row[fds[i].Name] = cdc.PostgresValue(fds[i].DataTypeOID, string(raw))
	}
	return row
}

func docKey(ids []string, row map[string]any) (string, map[string]any) {
	k, key, ok := cdc.RowKey(ids, row)
	if !ok {
		return "", nil
	}
	return k, key
}

// Cursor reads a table whole, in no order, inside the caller's
// transaction: for a table without key columns to page by.
type Cursor struct {
	t    Table
	conn *pgconn.PgConn
	name string
}

// Open declares a cursor over every row of t (that satisfies t.Where) on
// conn, which must be inside a transaction.
func (t Table) Open(ctx context.Context, conn *pgconn.PgConn) (*Cursor, error) {
	c := &Cursor{t: t, conn: conn, name: "ragsync_load"}
	sql := "DECLARE " + c.name + " NO SCROLL CURSOR FOR SELECT t.* FROM " + t.Ident() + " t"
	if t.Where != "" {
		sql += " WHERE (" + t.Where + ")"
	}
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		return nil, err
	}
	return c, nil
}

// Next reads the next n rows; none once every row is read.
func (c *Cursor) Next(ctx context.Context, n int) ([]Row, error) {
	return c.t.read(ctx, c.conn, fmt.Sprintf("FETCH %d FROM %s", n, c.name), nil, false)
}

// Close closes the cursor.
func (c *Cursor) Close(ctx context.Context) error {
	_, err := c.conn.Exec(ctx, "CLOSE "+c.name).ReadAll()
	return err
}

// ErrKeyColumns is Get's answer for a key that lacks one of the table's
// id columns: it names the row by other columns.
var ErrKeyColumns = errors.New("the key lacks an id column of the table")

// Get reads, on conn, the row of t whose id columns (IDs) hold the values
// of key (a cdc.Change's Key); found is false when there is none.
func (t Table) Get(ctx context.Context, conn *pgconn.PgConn, key map[string]any) (row Row, found bool, err error) {
	if len(t.IDs) == 0 {
		return Row{}, false, ErrKeyColumns
	}
	where := make([]string, len(t.IDs))
	args := make([][]byte, len(t.IDs))
	for i, c := range t.IDs {
		v, ok := key[c]
		if !ok {
			return Row{}, false, fmt.Errorf("%w: %s", ErrKeyColumns, c)
		}
		where[i] = fmt.Sprintf("t.%s = $%d", pgx.Identifier{c}.Sanitize(), i+1)
		args[i] = []byte(KeyText(v))
	}
	rows, err := t.read(ctx, conn, "SELECT t.* FROM "+t.Ident()+" t WHERE "+strings.Join(where, " AND "), args, false)
	if err != nil || len(rows) == 0 {
		return Row{}, false, err
	}
	return rows[len(rows)-1], true, nil
}

// KeyText renders a key value (a cdc.Change's Key holds them) as the text
// Postgres reads back as the column's type.
func KeyText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
