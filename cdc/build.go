package cdc

import "path"

// LookupTable returns the entry of tables that selects table ("schema.table"):
// an exact Match first, else the first path.Match pattern that matches, as
// the Decoder and the pipeline choose. ok is false when none does.
func LookupTable(tables []TableConfig, table string) (TableConfig, bool) {
	return Lookup(tables, func(t TableConfig) string { return t.Match }, table)
}

// Lookup is the one table-matching rule, for any list of table entries
// whose match (a "schema.table" name or a path.Match pattern) match gives:
// the entry whose match equals table, else the first whose pattern matches
// it.
func Lookup[T any](tables []T, match func(T) string, table string) (T, bool) {
	for _, t := range tables {
		if match(t) == table {
			return t, true
		}
	}
	for _, t := range tables {
		if ok, _ := path.Match(match(t), table); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// RowKey renders the document key of row from its columns cols exactly as
// the Decoder renders a Debezium message's (one value as its canonical text,
// several joined by "/" with "/" and "%" escaped), and returns the key
// columns' values. ok is false when a column is absent or null, or the only
// one is the empty string. Transports that build Changes themselves use it
// so their documents get the ids Debezium's events would give them.
func RowKey(cols []string, row map[string]any) (docKey string, key map[string]any, ok bool) {
	if len(cols) == 0 {
		return "", nil, false
	}
	vals, ok := pick(row, cols)
	if !ok {
		return "", nil, false
	}
	docKey, key, _ = joinKey(cols, vals, vals, keyText)
	return docKey, key, true
}

// ParseJSON parses a JSON text as the Decoder parses a Debezium Json
// column: numbers as json.Number, nesting bounded, invalid UTF-8 refused.
func ParseJSON(b []byte) (any, error) { return parseJSON(b) }
