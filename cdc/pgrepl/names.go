package pgrepl

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
)

// tableInfo is one table the source reads: what the catalog says about it
// and how tables[] identifies its documents.
type tableInfo struct {
	schema, table string
	name          string // cdc.TableName(schema, table): Change.Table
	oid           uint32
	kind          string // pg_class.relkind: r, or p for a partitioned table
	ident         string // pg_class.relreplident: d, n, f or i
	identCols     []string
	pk            []string
	cols          []string
	canSelect     bool
	owned         bool
	matched       bool     // selected by tables[]
	ids           []string // document id columns: tables[].id, else the primary key
	badLeaves     []string // partitions without a usable replica identity
	order         int      // position in the order Postgres lists the publication's tables
}

// sql is the table's name quoted for SQL.
func (t *tableInfo) sql() string { return pgx.Identifier{t.schema, t.table}.Sanitize() }

// literalTable reads a tables[].match that names one table: path.Match
// escapes ('\x' is x) removed, split at the first '.', and the percent
// escapes of cdc.TableName (%25, %2E, %2F) decoded in each part. ok is
// false for a pattern (an unescaped '*', '?' or '['); err says why a
// literal is not a schema.table name.
func literalTable(match string) (schema, table string, ok bool, err error) {
	var b strings.Builder
	for i := 0; i < len(match); i++ {
		c := match[i]
		switch c {
		case '*', '?', '[':
			return "", "", false, nil
		case '\\':
			if i+1 < len(match) {
				i++
				c = match[i]
			}
		case '.':
			if schema == "" && b.Len() > 0 {
				schema = b.String()
				b.Reset()
				continue
			}
		}
		b.WriteByte(c)
	}
	if schema == "" || b.Len() == 0 {
		return "", "", true, fmt.Errorf("tables[].match: %q is not a schema.table name: write it as schema.table (a '.' inside the schema as %%2E, '%%' as %%25, '/' as %%2F)", match)
	}
	return pctDecode(schema), pctDecode(b.String()), true, nil
}

var pctDecoder = strings.NewReplacer("%25", "%", "%2E", ".", "%2e", ".", "%2F", "/", "%2f", "/")

func pctDecode(s string) string { return pctDecoder.Replace(s) }

// idColumns is tables[].id for t, else its primary key.
func idColumns(tables []cdc.TableConfig, name string, pk []string) []string {
	if tc, ok := cdc.LookupTable(tables, name); ok && len(tc.ID) > 0 {
		return tc.ID
	}
	return pk
}
