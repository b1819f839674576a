package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ragsync/ragsync/embedder"
)

// probeText is what serve embeds once at start-up.
const probeText = "ragsync start-up probe"

// probeTimeout bounds the start-up probe, retries included: a provider
// that is down only delays serve by this much.
const probeTimeout = 30 * time.Second

// probeEmbedder embeds one short text at start-up, so that a model that
// answers with another size than embedder.dimensions, a bad key or an
// unknown model stops serve with the error naming the setting, before any
// document depends on it. A provider that is down or slow only warns: the
// pipeline waits for it like for any outage.
func probeEmbedder(ctx context.Context, emb embedder.Client, logger *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := emb.Embed(pctx, []string{probeText})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case fatal(err):
		return fmt.Errorf("check the embedder at start-up: %w", err)
	}
	logger.WarnContext(ctx, "the embedder did not answer the start-up probe; starting anyway, the pipeline waits for it", "model", emb.Model(), "error", err)
	return nil
}
