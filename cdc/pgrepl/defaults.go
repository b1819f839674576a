package pgrepl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// LegacyName is the slot and publication name ragsync used when
// source.postgres left them unset, before default names were derived from
// the index. A deployment whose records show it keeps it.
const LegacyName = "ragsync"

// DefaultName derives the default slot and publication name from the
// index schema and the index name: "ragsync_<schema>_<index>_<hash>",
// lower-case letters, digits and underscores, at most 63 bytes (Postgres's
// limit for both). Slots are cluster-wide and publications per database,
// so two deployments that index into different schemas or indexes do not
// share them by accident; the hash tells apart pairs whose underscores
// join to the same text (schema a_b with index c, schema a with index b_c).
func DefaultName(schema, index string) string {
	sum := sha256.Sum256([]byte(schema + "\x00" + index))
	tail := "_" + hex.EncodeToString(sum[:3])
	var b strings.Builder
	for _, r := range strings.ToLower("ragsync_" + schema + "_" + index) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	head := b.String()
	if len(head) > 63-len(tail) {
		head = head[:63-len(tail)]
	}
	return head + tail
}

// resolveNames fills an unset Slot and Publication. An existing deployment
// keeps the names it has: the legacy slot when this deployment's records
// show it (created, or loaded) and it exists in database; the legacy
// publication when this deployment recorded creating it, or when the slot
// already exists and the derived publication does not (a slot streams the
// publication it was started with, and before derived names that was the
// legacy one). Anything else gets cfg.DefaultName. An existing slot is
// never renamed.
func resolveNames(ctx context.Context, conn *pgx.Conn, database string, cfg Config) (Config, error) {
	if cfg.Slot != "" && cfg.Publication != "" {
		return cfg, nil
	}
	derived := cfg.DefaultName
	if derived == "" {
		derived = LegacyName
	}
	exists := func(sql, name string) (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, sql, name, database).Scan(&ok)
		return ok, err
	}
	const slotSQL = "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND database = $2)"
	const pubSQL = "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1 AND current_database() = $2)"
	if cfg.Slot == "" {
		cfg.Slot = derived
		if derived != LegacyName {
			legacy, err := exists(slotSQL, LegacyName)
			if err != nil {
				return cfg, fmt.Errorf("read replication slot %q: %w", LegacyName, err)
			}
			if legacy {
				created, err := cfg.State.Created(ctx, KindSlot, database, LegacyName)
				if err != nil {
					return cfg, fmt.Errorf("read what ragsync created: %w", err)
				}
				rec, err := cfg.State.Load(ctx, LegacyName)
				if err != nil {
					return cfg, fmt.Errorf("read initial load state of slot %q: %w", LegacyName, err)
				}
				if created || rec.Exists {
					cfg.Slot = LegacyName
				}
			}
		}
	}
	if cfg.Publication == "" {
		cfg.Publication = derived
		if derived != LegacyName {
			created, err := cfg.State.Created(ctx, KindPublication, database, LegacyName)
			if err != nil {
				return cfg, fmt.Errorf("read what ragsync created: %w", err)
			}
			if !created {
				slot, err := exists(slotSQL, cfg.Slot)
				if err != nil {
					return cfg, fmt.Errorf("read replication slot %q: %w", cfg.Slot, err)
				}
				pub, err := exists(pubSQL, derived)
				if err != nil {
					return cfg, fmt.Errorf("read publication %q: %w", derived, err)
				}
				created = slot && !pub
			}
			if created {
				cfg.Publication = LegacyName
			}
		}
	}
	return cfg, nil
}

// resolveConfigNames is resolveNames on a connection of its own.
func resolveConfigNames(ctx context.Context, cfg Config) (Config, error) {
	conn, err := connectSQL(ctx, cfg.URL, cfg.ApplicationName)
	if err != nil {
		return cfg, err
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return cfg, fmt.Errorf("read source database name: %w", err)
	}
	return resolveNames(ctx, conn, db, cfg)
}
