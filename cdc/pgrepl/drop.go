package pgrepl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Dropped says what Drop removed.
type Dropped struct {
	Slot, Publication bool
}

// Drop drops the replication slot of cfg (`ragsync slot drop`) and, when
// ragsync created it, the publication, and forgets the slot's initial
// loads so a new slot loads the tables again. It refuses a slot ragsync did
// not create (another tool's, or one created before ragsync recorded what
// it creates) unless force, and a slot a consumer streams from. A
// publication ragsync did not create is never dropped: the application or
// another subscriber may use it.
func Drop(ctx context.Context, cfg Config, force bool) (Dropped, error) {
	cfg = cfg.withDefaults()
	var out Dropped
	conn, err := connectSQL(ctx, cfg.URL, cfg.ApplicationName)
	if err != nil {
		return out, err
	}
	defer conn.Close(context.Background())
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return out, fmt.Errorf("read source database name: %w", err)
	}
	var active bool
	err = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&active)
	slotExists := err == nil
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return out, fmt.Errorf("read replication slot %q: %w", cfg.Slot, err)
	case active:
		return out, fmt.Errorf("replication slot %q is in use: stop `ragsync serve` first", cfg.Slot)
	}
	slotOurs, err := cfg.State.Created(ctx, KindSlot, db, cfg.Slot)
	if err != nil {
		return out, fmt.Errorf("read what ragsync created: %w", err)
	}
	pubOurs, err := cfg.State.Created(ctx, KindPublication, db, cfg.Publication)
	if err != nil {
		return out, fmt.Errorf("read what ragsync created: %w", err)
	}
	if slotExists && !slotOurs && !force {
		return out, fmt.Errorf("replication slot %q in database %q was not created by ragsync (another tool's, or created before ragsync recorded what it creates): leave it, or run `ragsync slot drop --force` to drop it anyway", cfg.Slot, db)
	}
	if slotExists {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", cfg.Slot); err != nil {
			return out, fmt.Errorf("drop replication slot %q: %w", cfg.Slot, err)
		}
		out.Slot = true
	}
	if err := cfg.State.ForgetCreated(ctx, KindSlot, db, cfg.Slot); err != nil {
		return out, fmt.Errorf("forget replication slot %q: %w", cfg.Slot, err)
	}
	if err := cfg.State.ForgetLoad(ctx, cfg.Slot); err != nil {
		return out, fmt.Errorf("forget the initial load of slot %q: %w", cfg.Slot, err)
	}
	if pubOurs {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
			return out, fmt.Errorf("drop publication %q: %w", cfg.Publication, err)
		}
		out.Publication = true
		if err := cfg.State.ForgetCreated(ctx, KindPublication, db, cfg.Publication); err != nil {
			return out, fmt.Errorf("forget publication %q: %w", cfg.Publication, err)
		}
	}
	if !out.Slot && !out.Publication {
		return out, fmt.Errorf("replication slot %q does not exist in database %q, and ragsync created no publication %q there: nothing to drop", cfg.Slot, db, cfg.Publication)
	}
	return out, nil
}
