package pipeline

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/sink"
)

// TableConfig says how the rows of one source table become documents.
type TableConfig struct {
	// Match is the Debezium source "schema.table" (MongoDB "db.collection"),
	// or a path.Match pattern: "public.*", "*" for any table. An exact
	// match wins over a pattern.
	Match string
	// Text is a template over the row's columns, "{{column}}" for each value,
	// e.g. "# {{title}}\n\n{{body}}". Defaults to every text column, sorted by
	// name, one paragraph each.
	Text string
	// Metadata lists the columns copied into the document's jsonb metadata.
	Metadata []string
	// Fields are declared metadata fields: name → a one-line template over
	// the row, rendered like Text, stored in the document's metadata
	// beside the Metadata columns.
	Fields map[string]string
	// Tenant is the column holding the document's tenant. Optional.
	Tenant string
	// ID lists the document id columns; only used here to keep them out of
	// the default text.
	ID []string
}

var placeholder = regexp.MustCompile(`\{\{\s*([^{}\s]+)\s*\}\}`)

// templateLine is one line of a tables[].text template, cut into literal
// text and placeholders.
type templateLine struct {
	segs  []templateSeg
	holes bool // the line has a placeholder
}

// templateSeg is literal text, or the column a placeholder names.
type templateSeg struct {
	text, column string
}

// templates holds each template cut into lines, once per template text:
// matching the placeholders of every row's template cost more than
// filling them.
var templates sync.Map // string -> []templateLine

func parsedTemplate(text string) []templateLine {
	if v, ok := templates.Load(text); ok {
		return v.([]templateLine)
	}
	var lines []templateLine
	for _, line := range strings.Split(text, "\n") {
		var l templateLine
		at := 0
		for _, m := range placeholder.FindAllStringSubmatchIndex(line, -1) {
			if m[0] > at {
				l.segs = append(l.segs, templateSeg{text: line[at:m[0]]})
			}
			l.segs = append(l.segs, templateSeg{column: line[m[2]:m[3]]})
			l.holes = true
			at = m[1]
		}
		if at < len(line) {
			l.segs = append(l.segs, templateSeg{text: line[at:]})
		}
		lines = append(lines, l)
	}
	v, _ := templates.LoadOrStore(text, lines)
	return v.([]templateLine)
}

// templateColumns returns the columns a template reads.
// TemplateColumns lists the columns tables[].text names, in order, with
// repeats. Sources that know their tables' columns warn when one is absent.
func (t TableConfig) TemplateColumns() []string { return t.templateColumns() }

func (t TableConfig) templateColumns() []string {
	var cols []string
	for _, m := range placeholder.FindAllStringSubmatch(t.Text, -1) {
		cols = append(cols, m[1])
	}
	return cols
}

// render builds the document text from a row.
func (t TableConfig) render(row map[string]any) string {
	if t.Text != "" {
		// Line by line: a template line whose columns are all missing or
		// empty is left out, so a row without a title indexes no bare "#"
		// (or "Title:") chunk.
		var b []byte
		wrote := false
		for _, line := range parsedTemplate(t.Text) {
			mark := len(b)
			if wrote {
				b = append(b, '\n')
			}
			filled := false
			for _, seg := range line.segs {
				if seg.column == "" {
					b = append(b, seg.text...)
					continue
				}
				v := textOf(row[seg.column])
				filled = filled || strings.TrimSpace(v) != ""
				b = append(b, v...)
			}
			if line.holes && !filled {
				b = b[:mark]
				continue
			}
			wrote = true
		}
		return string(b)
	}
	var cols []string
	for c, v := range row {
		if _, ok := v.(string); ok && !slices.Contains(t.ID, c) && c != t.Tenant {
			cols = append(cols, c)
		}
	}
	slices.Sort(cols)
	parts := make([]string, 0, len(cols))
	for _, c := range cols {
		if s := row[c].(string); strings.TrimSpace(s) != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n\n")
}

// metadata is the document's metadata: the Metadata columns' values, and
// each declared field rendered (a field whose template's columns are all
// empty is left out, as a template line is).
func (t TableConfig) metadata(row map[string]any) map[string]any {
	md := make(map[string]any, len(t.Metadata)+len(t.Fields))
	for _, c := range t.Metadata {
		if v, ok := row[c]; ok {
			md[c] = v
		}
	}
	for name, tmpl := range t.Fields {
		if v := (TableConfig{Text: tmpl}).render(row); v != "" {
			md[name] = v
		}
	}
	return md
}

func (t TableConfig) tenant(row map[string]any) string {
	if t.Tenant == "" {
		return ""
	}
	return textOf(row[t.Tenant])
}

// textOf renders a decoded column value as text for a template.
func textOf(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool, float64, int64, int:
		return fmt.Sprint(v)
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			parts = append(parts, textOf(e))
		}
		return strings.Join(parts, ", ")
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	}
}

// tableFor returns the table config for a change's table, by cdc's one
// matching rule (cdc.Lookup): the entry whose Match equals it, else the
// first whose Match is a pattern matching it ("public.*", "*").
func tableFor(tables []TableConfig, table string) (TableConfig, bool) {
	return cdc.Lookup(tables, func(t TableConfig) string { return t.Match }, table)
}

// DocID is the document id the sink stores: the source table and the key
// within it, so two tables with overlapping keys never collide.
func DocID(c cdc.Change) string { return sink.DocID(c.Table, c.DocKey) }

// renderHash is the render hash of text cut by the chunker whose
// fingerprint is fingerprint (sink.Document.RenderHash): equal hashes mean
// equal chunks. It is 64-bit xxHash, hex: it is computed for every update
// of every document, where SHA-256 was a twentieth of a metadata-only
// update's CPU, and it only ever compares two versions of one document's
// text, so a chance collision (2^-64) is the only risk, not an adversary's
// (a document's writer could as well write the old text).
func renderHash(fingerprint, text string) string {
	h := xxhash.New()
	_, _ = h.WriteString(fingerprint)
	_, _ = h.Write([]byte{0})
	_, _ = h.WriteString(text)
	return strconv.FormatUint(h.Sum64(), 16)
}
