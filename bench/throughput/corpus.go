package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/ragsync/ragsync/bench/internal/backlog"
)

// corpus is the load: documents of distinct prose (ASCII, ~60-word
// paragraphs from a 512-word vocabulary: identical vectors would make HNSW
// measure its own pathology, see bench/internal/backlog).
type corpus struct {
	titles, bodies []string
	bytes          int
}

func newCorpus(docs, size int) *corpus {
	c := &corpus{}
	for d := range docs {
		rng := rand.New(rand.NewPCG(uint64(d), 15))
		var b strings.Builder
		for b.Len() < size {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			for w := range 60 {
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(backlog.Word(rng))
				if w%12 == 11 {
					b.WriteByte('.')
				}
			}
			b.WriteByte('.')
		}
		title := fmt.Sprintf("Document %d", d)
		c.titles = append(c.titles, title)
		c.bodies = append(c.bodies, b.String())
		c.bytes += len(title) + b.Len()
	}
	return c
}

// text is what serve renders with the table template below.
func (c *corpus) text(d int) string { return "# " + c.titles[d] + "\n\n" + c.bodies[d] }

const tableConfig = `tables:
  - match: public.articles
    id: [id]
    text: "# {{title}}\n\n{{body}}"
`

// fieldsConfig declares, under tableConfig's table, a metadata field
// rendered from the status column, which the text template does not
// render: an update that changes only status changes the document's
// metadata and not its text. Older binaries do not know tables[].fields
// (see -fields-new).
const fieldsConfig = `    fields:
      semantic_tag: "{{status}}"
`

// Every row carries a status the text does not render: the load's rows
// are drafts, and every edit publishes its document, so each edit also
// carries a metadata change when the status is a declared field.
const (
	loadStatus = "draft"
	editStatus = "published"
)

// writeEvents writes one Debezium create event per document.
func (c *corpus) writeEvents(dir string) (string, error) {
	return c.write(filepath.Join(dir, "events.jsonl"), "c", 0, loadStatus, func(body string) string { return body })
}

// writeEdits writes one Debezium update event per document, after every
// create, that changes n characters in the middle of its body (5 by
// default: the small edit whose cost should follow the edit, not the
// document). With n = 0 the body is unchanged: a new version of the row,
// as an UPDATE of a column the index does not render makes, so the run
// prices what any update of the document costs before its text changes.
// Every edit also changes the status column (see editStatus).
func (c *corpus) writeEdits(dir string, n int) (string, error) {
	mark := "EDIT5"
	if n != len(mark) {
		mark = strings.Repeat("E", n)
	}
	return c.write(filepath.Join(dir, "edits.jsonl"), "u", len(c.titles), editStatus, func(body string) string {
		mid := len(body) / 2
		return body[:mid] + mark + body[min(mid+n, len(body)):]
	})
}

// editTS is the commit time (source.ts_ms) of document d's edit event: a
// document whose stored commit time is this took its edit.
func (c *corpus) editTS(d int) int64 { return eventTS(len(c.titles), d) }

// eventTS is the commit time in ms of document d's event after skip
// earlier events; each event's is distinct.
func eventTS(skip, d int) int64 { return 1700000000000 + int64(1000+skip+d) }

// write writes one event of op per document, with source positions after
// skip earlier events, and status as every row's status.
func (c *corpus) write(path, op string, skip int, status string, body func(string) string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	for d := range c.titles {
		lsn := int64(1000 + skip + d)
		ts := eventTS(skip, d)
		v, err := json.Marshal(map[string]any{
			"op": op, "ts_ms": ts, "before": nil,
			"after": map[string]any{"id": d, "title": c.titles[d], "body": body(c.bodies[d]), "status": status},
			"source": map[string]any{"connector": "postgresql", "db": "app", "schema": "public", "table": "articles",
				"lsn": lsn, "txId": lsn, "ts_ms": ts},
		})
		if err != nil {
			return "", err
		}
		w.Write(v)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return path, f.Close()
}
