package pgrepl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/pgsnap"
)

// ReplayPath is the file `ragsync dlq replay` moves the dead letters of
// dlqPath to, and which the source applies at start.
func ReplayPath(dlqPath string) string { return dlqPath + ".replay" }

// DeadLetterFile is the Postgres source's dead-letter store: the JSON Lines
// file dlqPath, each line a change as JSON in the file transport's shape.
// Its Replay moves the dead letters to ReplayPath(dlqPath), which the
// source applies when it next starts (each change read again at its own
// version, so one that a later change superseded is skipped), and then
// empties.
func DeadLetterFile(dlqPath string) *file.DeadLetterFile {
	return file.NewDeadLetterFile(dlqPath, ReplayPath(dlqPath))
}

// replay hands over the changes queued in ReplayPath(DLQPath) in one batch
// whose Ack empties the file. Each is the row as the source holds it now,
// read again by its document id (a delete if the row is gone), at the
// version the dead-lettered change had: a change that a later one
// superseded is skipped by the sink's fence, and a change that was
// incomplete (unchanged TOAST values without a stored row) comes back whole.
func (s *Source) replay(ctx context.Context) error {
	if s.cfg.DLQPath == "" {
		return nil
	}
	path := ReplayPath(s.cfg.DLQPath)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read replayed dead letters: %w", err)
	}
	var msgs []cdc.Record
	var conn *pgx.Conn
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	for line := int64(1); sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		m := file.ParseLine(sc.Bytes(), line)
		dec := json.NewDecoder(bytes.NewReader(m.Value))
		dec.UseNumber()
		var ch cdc.Change
		if err := dec.Decode(&ch); err != nil || ch.Table == "" {
			return fmt.Errorf("%s line %d is not a change of this source (%v): remove the line, or the file, and start serve again", path, line, err)
		}
		if conn == nil {
			if conn, err = s.connectSQL(ctx); err != nil {
				return err
			}
			defer conn.Close(context.Background())
		}
		again, err := s.reread(ctx, conn, ch)
		if err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
		msgs = append(msgs, message(again, m.Timestamp))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read replayed dead letters: %w", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	s.log.Info("applying replayed dead letters", "changes", len(msgs), "file", path)
	empty := func(context.Context) error {
		if err := os.Truncate(path, 0); err != nil {
			return fmt.Errorf("empty %s after replaying it (delete it, or the next start applies it again, harmlessly): %w", path, err)
		}
		return nil
	}
	if !s.emit(ctx, s.batch(msgs, 0, empty)) {
		return ctx.Err()
	}
	return nil
}

// reread reads ch's row again by its document id.
func (s *Source) reread(ctx context.Context, conn *pgx.Conn, ch cdc.Change) (cdc.Change, error) {
	var t *tableInfo
	for _, ti := range s.tables {
		if ti.name == ch.Table && ti.matched {
			t = ti
		}
	}
	if t == nil || len(ch.Key) == 0 {
		// Not a table this source reads any more, or no document: hand it
		// over as it was, for the pipeline to count or skip.
		return ch, nil
	}
	row, found, err := t.reader().Get(ctx, conn.PgConn(), ch.Key)
	if errors.Is(err, pgsnap.ErrKeyColumns) {
		return ch, nil // keyed by other columns when it was written
	}
	if err != nil {
		return ch, fmt.Errorf("read %s again: %w", t.sql(), s.classifyLoad(err, t))
	}
	out := cdc.Change{Table: ch.Table, DocKey: ch.DocKey, Key: ch.Key, Version: ch.Version, TxID: ch.TxID, Coord: ch.Coord}
	if !found {
		out.Op, out.Before = cdc.OpDelete, ch.Before
		return out, nil
	}
	out.Op, out.After = cdc.OpUpdate, row.After
	return out, nil
}
