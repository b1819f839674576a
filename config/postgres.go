package config

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/pipeline"
)

// PostgresSourceOptions are the source.postgres settings beyond url,
// publication and slot, inlined into PostgresSourceConfig.
type PostgresSourceOptions struct {
	// InitialLoad reads the published tables into the index when the slot
	// is created (in the slot's exported snapshot, so no row is lost or
	// doubled between the load and the stream). Defaults to true.
	InitialLoad *bool `yaml:"initial_load"`
	// MaxRetainedWALBytes is how much WAL the slot may hold on the source
	// before every slot check logs a warning. Defaults to 1073741824
	// (1 GiB); -1 disables the warning.
	MaxRetainedWALBytes int `yaml:"max_retained_wal_bytes"`
	// BatchSize is the most changes handed to the pipeline at once.
	// Defaults to 512.
	BatchSize int `yaml:"batch_size"`
	// MaxBufferBytes bounds the row data read from the slot and not yet
	// handed to the pipeline; a transaction of any size streams through
	// it. Defaults to 33554432 (32 MiB).
	MaxBufferBytes int `yaml:"max_buffer_bytes"`
	// StatusInterval is how often the confirmed position is reported when
	// the server does not ask sooner; keep it well below the server's
	// wal_sender_timeout. Defaults to 10s.
	StatusInterval time.Duration `yaml:"status_interval"`
	// HealthInterval is how often the slot's retained WAL and status are
	// read. Defaults to 15s.
	HealthInterval time.Duration `yaml:"health_interval"`
	// ApplicationName names ragsync's connections on the source
	// (pg_stat_activity, pg_stat_replication). Defaults to "ragsync".
	ApplicationName string `yaml:"application_name"`
	// ReconcileMax bounds what an initial load's reconcile may delete of a
	// table's documents: a share ("10%", "0.1") or a count ("500"). Past
	// it nothing is deleted and serve logs the count, a sample of keys and
	// the fix. Defaults to 10% (at least 5 documents).
	ReconcileMax string `yaml:"reconcile_max"`
	// AdoptMove accepts that the source database now answers with another
	// identity (system identifier) than the one the slot's loads recorded:
	// a dump/restore, an upgrade, another server. Serve then loads the
	// tables again and the load replaces the old server's documents.
	// Defaults to false: such a start is refused (serve --adopt-source sets
	// it for one start).
	AdoptMove bool `yaml:"adopt_move"`
}

// pgName is what ragsync accepts as a slot or publication name: Postgres
// allows only these characters in slot names, and the publication name is
// passed inside a quoted plugin option.
var pgName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// validatePostgresSource checks source.postgres for kind postgres.
func (c Config) ValidatePostgresSource() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	p := c.Source.Postgres
	if p.URL == "" {
		add("source.postgres.url: set the URL of the source (document) database, e.g. postgres://app@db:5432/app")
	}
	for _, f := range []struct{ path, v string }{{"source.postgres.slot", p.Slot}, {"source.postgres.publication", p.Publication}} {
		if f.v != "" && !pgName.MatchString(f.v) {
			add("%s: %q must be lower-case letters, digits and underscores, e.g. ragsync", f.path, f.v)
		}
	}
	if p.MaxRetainedWALBytes < -1 {
		add("source.postgres.max_retained_wal_bytes: %d must be -1 (no warning), 0 (default 1 GiB) or a size in bytes", p.MaxRetainedWALBytes)
	}
	if p.BatchSize < 0 {
		add("source.postgres.batch_size: %d must be > 0, or 0 for the default 512", p.BatchSize)
	}
	if p.MaxBufferBytes < 0 || (p.MaxBufferBytes > 0 && p.MaxBufferBytes < 1<<20) {
		add("source.postgres.max_buffer_bytes: %d must be at least 1048576 (1 MiB), or 0 for the default 32 MiB", p.MaxBufferBytes)
	}
	if p.StatusInterval < 0 || p.StatusInterval > 5*time.Minute {
		add("source.postgres.status_interval: %s must be between 0 (default 10s) and 5m, and below the server's wal_sender_timeout", p.StatusInterval)
	}
	if p.ReconcileMax != "" {
		if _, err := cdc.ParseReconcileLimit(p.ReconcileMax); err != nil {
			add("source.postgres.reconcile_max: %v", err)
		}
	}
	if p.HealthInterval < 0 {
		add("source.postgres.health_interval: %s must not be negative", p.HealthInterval)
	}
	return errs
}

// postgresSourceConfig builds the source's config; state records finished
// initial loads and what the source created (nil: in memory).
func (c Config) PostgresSourceConfig(state pgrepl.State, logger *slog.Logger, reg prometheus.Registerer) pgrepl.Config {
	p := c.Source.Postgres
	load := p.InitialLoad == nil || *p.InitialLoad
	maxWAL := int64(p.MaxRetainedWALBytes)
	switch maxWAL {
	case 0:
		maxWAL = 1 << 30
	case -1:
		maxWAL = 0
	}
	var tables []cdc.TableConfig
	textCols := map[string][]string{}
	for _, t := range c.Tables {
		tables = append(tables, cdc.TableConfig{Match: t.Match, ID: t.ID})
		textCols[t.Match] = pipeline.TableConfig{Text: t.Text}.TemplateColumns()
	}
	limit := cdc.DefaultReconcileLimit
	if p.ReconcileMax != "" {
		limit, _ = cdc.ParseReconcileLimit(p.ReconcileMax) // validated above
	}
	return pgrepl.Config{
		ReconcileLimit:      limit,
		AdoptMove:           p.AdoptMove,
		URL:                 p.URL,
		Publication:         p.Publication,
		Slot:                p.Slot,
		DefaultName:         pgrepl.DefaultName(c.Postgres.Schema, c.Index),
		Tables:              tables,
		TextColumns:         textCols,
		InitialLoad:         load,
		State:               state,
		BatchSize:           p.BatchSize,
		MaxBufferBytes:      p.MaxBufferBytes,
		StatusInterval:      p.StatusInterval,
		HealthInterval:      p.HealthInterval,
		MaxRetainedWALBytes: maxWAL,
		ApplicationName:     p.ApplicationName,
		Logger:              logger,
		Registerer:          reg,
	}
}
