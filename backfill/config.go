package backfill

import (
	"errors"

	"fmt"
	"github.com/ragsync/ragsync/cdc"
	"log/slog"
	"strings"
)

// Table is one source table to backfill.
type Table struct {
	// Name is "schema.table", as Debezium names it in source.schema and
	// source.table (and as tables[].match names it in ragsync.yaml).
	Name string
	// ID lists the document id columns, which must be unique and not null:
	// pages are read in their order. Defaults to the table's primary key.
	ID []string
	// Where is an optional SQL condition on the table's columns (by name,
	// or qualified with the alias t), e.g. "updated_at > now() - interval
	// '30 days'". Defaults to every row.
	Where string
}

// Config configures a Source.
type Config struct {
	// URL is the document database to read, a libpq URL or DSN. It must be
	// the primary: the snapshot position is a WAL insert position.
	URL string
	// Tables are read one after the other, in order.
	Tables []Table
	// PageRows is how many rows one page (one pipeline batch, one
	// checkpoint) holds. Defaults to 500.
	PageRows int
	// Rate caps rows read per second, over any second of the run, not just
	// between pages: under a rate a page holds at most one second's rows
	// (fewer than PageRows). 0 means no cap. Defaults to 0.
	Rate float64
	// Resume continues each table after its checkpoint instead of starting
	// over. Defaults to false.
	Resume bool
	// Reconcile is the index a table read whole is reconciled with: once
	// every row of a table read from its start in this run's snapshot
	// without a Where is applied, the table's documents whose rows are
	// gone are deleted through the pipeline (reconcile.go). Nil: no
	// reconciliation. In a dry run the deletes reach the DryRun, which
	// writes nothing, and Progress counts them.
	Reconcile Index
	// DebeziumServer, when set, is the logical server name (topic.prefix)
	// of the Debezium connector that streams this database to serve: the
	// rows' versions then name the connector's source, "dbz:<server>/<db>",
	// so they order by position against the connector's events of the
	// same database and the reconcile judges the documents it wrote.
	// Empty: the database's own identity (cdc.PostgresSource), as the
	// Postgres source streams it.
	DebeziumServer string
	// Moves are the recorded moves of the sources the rows' versions may
	// name (source.moves): a version of a moved source read after a move
	// is of the move's epoch, as the decoder gives the connector's events
	// of that time, so the rows order against them. Defaults to none.
	Moves []cdc.SourceMove
	// ReconcileUnknown also reconciles the table's documents whose versions
	// name no source (stored before versions named theirs), taking them as
	// this database's. Defaults to false: nothing proves which database
	// wrote them, so they are left alone and counted.
	ReconcileUnknown bool
	// ReconcileLimit bounds the share of a table's documents one reconcile
	// may delete; past it the run stops before deleting any
	// (*cdc.ReconcileRefused). Defaults to cdc.DefaultReconcileLimit.
	ReconcileLimit *cdc.ReconcileLimit
	// DryRun reports a reconcile past ReconcileLimit in Progress.Refused
	// instead of failing, so a dry run prints what the run would refuse.
	DryRun bool
	// Topic is the topic name given to the messages (their Coord), for logs
	// and dead letters. Defaults to "ragsync-backfill".
	Topic string
	// Logger receives start, stop and per-table summaries. Nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.PageRows <= 0 {
		c.PageRows = 500
	}
	if c.ReconcileLimit == nil {
		l := cdc.DefaultReconcileLimit
		c.ReconcileLimit = &l
	}
	if c.Topic == "" {
		c.Topic = "ragsync-backfill"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem of c at once, each naming the setting and
// the fix.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("backfill.source_url: must be set, pass --source-url or set source.postgres.url to the document database"))
	}
	if len(c.Tables) == 0 {
		errs = append(errs, errors.New("backfill tables: none given, pass --table schema.table or list tables[].match in the config"))
	}
	for i, t := range c.Tables {
		if _, _, err := splitName(t.Name); err != nil {
			errs = append(errs, fmt.Errorf("backfill table %d: %w", i, err))
		}
		for j, col := range t.ID {
			if col == "" {
				errs = append(errs, fmt.Errorf("backfill table %s: id[%d] is empty, set it to a column name", t.Name, j))
			}
		}
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("backfill rate: %v must be >= 0 rows/s (0 means no cap)", c.Rate))
	}
	if c.PageRows < 0 {
		errs = append(errs, fmt.Errorf("backfill page_rows: %d must be > 0 (or 0 for the default 500)", c.PageRows))
	}
	return errors.Join(errs...)
}

// splitName splits "schema.table". Patterns are not tables: a backfill
// reads named tables only.
func splitName(name string) (string, string, error) {
	s, t, ok := strings.Cut(name, ".")
	if !ok || s == "" || t == "" || strings.ContainsAny(name, "*?[") {
		return "", "", fmt.Errorf("table %q: want schema.table (patterns are not allowed: name each table)", name)
	}
	return s, t, nil
}
