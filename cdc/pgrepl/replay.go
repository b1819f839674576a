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

	"github.com/ragsync/ragsync/cdc"
)

// ReplayPath is the file `ragsync dlq replay` moves the dead letters of
// dlqPath to, and which the source applies at start.
func ReplayPath(dlqPath string) string { return dlqPath + ".replay" }

// replay hands over the changes queued in ReplayPath(DLQPath), each with
// the version it had (a change that a later one superseded is skipped by
// the sink's fence), in one batch whose Ack empties the file.
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
	var msgs []cdc.Message
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	for line := int64(1); sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		m := cdc.ParseLine(sc.Bytes(), line)
		dec := json.NewDecoder(bytes.NewReader(m.Value))
		dec.UseNumber()
		var ch cdc.Change
		if err := dec.Decode(&ch); err != nil || ch.Table == "" {
			return fmt.Errorf("%s line %d is not a change of this source (%v): remove the line, or the file, and start serve again", path, line, err)
		}
		m = message(ch, m.Timestamp)
		msgs = append(msgs, m)
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
