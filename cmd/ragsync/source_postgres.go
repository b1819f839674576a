package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

var (
	_ pipeline.Source = (*pgrepl.Source)(nil)
	_ pgrepl.State    = sourceState{}
	_ pgrepl.Index    = (*sink.Store)(nil)
)

// newPostgresSource starts the logical replication source; its initial
// loads and what it created are recorded in the index schema. Dead letters
// go to a JSON Lines file (dlq.path, default ragsync-<slot>.dlq.jsonl).
func newPostgresSource(ctx context.Context, cfg Config, once bool, pool *pgxpool.Pool, st *sink.Store, reg prometheus.Registerer, logger *slog.Logger) (*pgrepl.Source, pipeline.DeadLetters, error) {
	pc := cfg.postgresSourceConfig(sourceState{sink.NewSourceState(pool)}, logger, reg)
	pc.Index = st
	pc.StopAtEnd = once
	pc.DLQPath = postgresDLQPath(cfg)
	src, err := pgrepl.New(ctx, pc)
	if err != nil {
		return nil, nil, err
	}
	return src, file.NewDeadLetters(postgresDLQPath(cfg), version), nil
}

// postgresDLQPath is where the Postgres source's dead letters go: dlq.path,
// or "ragsync-<slot>.dlq.jsonl".
func postgresDLQPath(cfg Config) string {
	if cfg.DLQ.Path != "" {
		return filepath.Clean(cfg.DLQ.Path)
	}
	slot := cfg.Source.Postgres.Slot
	if slot == "" {
		slot = "ragsync"
	}
	return "ragsync-" + slot + ".dlq.jsonl"
}

// sourceState adapts sink.SourceState to pgrepl.State.
type sourceState struct{ *sink.SourceState }

func (s sourceState) Load(ctx context.Context, slot string) (pgrepl.LoadRecord, error) {
	r, err := s.SourceState.Load(ctx, slot)
	return pgrepl.LoadRecord(r), err
}

func (s sourceState) SaveLoad(ctx context.Context, slot string, r pgrepl.LoadRecord) error {
	return s.SourceState.SaveLoad(ctx, slot, sink.SourceLoad(r))
}

// slotReadyz answers /readyz with the slot's problem and its fix while the
// slot is lost or gone; otherwise next answers.
func slotReadyz(src *pgrepl.Source, next http.Handler) http.Handler {
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
