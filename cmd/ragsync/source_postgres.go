package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/pipeline"
)

var (
	_ pipeline.Source  = (*cdc.PostgresSource)(nil)
	_ pipeline.Decoder = cdc.PostgresDecoder{}
)

// newPostgresSource starts the logical replication source; its initial
// loads are recorded in the index's source_loads table. Dead letters go to
// a JSON Lines file (dlq.path, default ragsync-<slot>.dlq.jsonl).
func newPostgresSource(ctx context.Context, cfg Config, once bool, pool *pgxpool.Pool, reg prometheus.Registerer, logger *slog.Logger) (*cdc.PostgresSource, pipeline.DeadLetters, error) {
	pc := cfg.postgresSourceConfig(loadState{pool}, logger, reg)
	pc.StopAtEnd = once
	src, err := cdc.NewPostgresSource(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	dlqPath := cfg.DLQ.Path
	if dlqPath == "" {
		slot := cfg.Source.Postgres.Slot
		if slot == "" {
			slot = "ragsync"
		}
		dlqPath = "ragsync-" + slot + ".dlq.jsonl"
	}
	return src, cdc.NewFileDeadLetters(filepath.Clean(dlqPath), version), nil
}

// newDecoder is the Debezium decoder, reading the Postgres source's
// versions when that is the source.
func newDecoder(cfg Config) pipeline.Decoder {
	d := cdc.NewDecoder(cfg.decoderConfig())
	if cfg.Source.Kind == "postgres" {
		return cdc.PostgresDecoder{Decoder: d}
	}
	return d
}

// loadState keeps finished initial loads in the index schema (migration
// 00008), beside the documents they produced.
type loadState struct{ pool *pgxpool.Pool }

func (l loadState) LoadDone(ctx context.Context, slot string) (bool, error) {
	var done bool
	err := l.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM source_loads WHERE slot = $1 AND done_at IS NOT NULL)", slot).Scan(&done)
	return done, err
}

func (l loadState) MarkLoadDone(ctx context.Context, slot string) error {
	_, err := l.pool.Exec(ctx, "INSERT INTO source_loads (slot, done_at) VALUES ($1, now()) ON CONFLICT (slot) DO UPDATE SET done_at = now()", slot)
	return err
}

func (l loadState) ForgetLoad(ctx context.Context, slot string) error {
	_, err := l.pool.Exec(ctx, "DELETE FROM source_loads WHERE slot = $1", slot)
	return err
}

func (l loadState) LoadProgress(ctx context.Context, slot string) (cdc.LoadProgress, error) {
	var p cdc.LoadProgress
	var table *string
	err := l.pool.QueryRow(ctx, "SELECT progress_table, progress_key FROM source_loads WHERE slot = $1 AND done_at IS NULL", slot).Scan(&table, &p.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return cdc.LoadProgress{}, nil
	}
	if table != nil {
		p.Table = *table
	}
	return p, err
}

func (l loadState) SaveLoadProgress(ctx context.Context, slot string, p cdc.LoadProgress) error {
	_, err := l.pool.Exec(ctx, `INSERT INTO source_loads (slot, progress_table, progress_key) VALUES ($1, $2, $3)
ON CONFLICT (slot) DO UPDATE SET progress_table = excluded.progress_table, progress_key = excluded.progress_key`, slot, p.Table, p.Key)
	return err
}

// slotReadyz answers /readyz with the slot's problem and its fix while the
// slot is lost or gone; otherwise next answers.
func slotReadyz(src *cdc.PostgresSource, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			if msg := src.Unhealthy(); msg != "" {
				http.Error(w, fmt.Sprintf("source: %s", msg), http.StatusServiceUnavailable)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
