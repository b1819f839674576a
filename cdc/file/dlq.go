package file

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/ragsync/ragsync/cdc"
)

// DeadLetterFile is a dead-letter file (what DeadLetters writes) as a
// cdc.DeadLetterStore.
type DeadLetterFile struct {
	path, replayTo string
}

var _ cdc.DeadLetterStore = (*DeadLetterFile)(nil)

// NewDeadLetterFile works on the dead-letter file path. Replay appends its
// dead letters to replayTo: the file source's file, or a queue another
// transport reads (the Postgres source's, see cdc/pgrepl).
func NewDeadLetterFile(path, replayTo string) *DeadLetterFile {
	return &DeadLetterFile{path: path, replayTo: replayTo}
}

// Path is the dead-letter file.
func (d *DeadLetterFile) Path() string { return d.path }

// ReplayTo is the file Replay appends to.
func (d *DeadLetterFile) ReplayTo() string { return d.replayTo }

// List returns up to n dead letters of the file (n <= 0: all), oldest
// first. A DeadLetter's Offset is its line in that file and Timestamp the
// __connect.errors.timestamp header. A file that does not exist holds no
// dead letters.
func (d *DeadLetterFile) List(_ context.Context, n int) ([]cdc.DeadLetter, error) {
	path := d.path
	var out []cdc.DeadLetter
	err := readDLQFile(path, func(m cdc.Record) bool {
		out = append(out, fileDeadLetter(m))
		return n <= 0 || len(out) < n
	})
	return out, err
}

// Replay appends every dead letter of the file to the replay file without
// the reason headers — the message as it was read — and then empties the
// dead-letter file, so a second replay adds nothing. A serve following the
// replay file picks them up; serve --once replays the whole file, where
// version fencing makes the lines applied before no-ops. It returns how
// many it replayed.
func (d *DeadLetterFile) Replay(_ context.Context) (int, error) {
	dlqPath, toPath := d.path, d.replayTo
	if toPath == "" {
		return 0, fmt.Errorf("replay %s: no file to replay into", dlqPath)
	}
	var lines [][]byte
	var encErr error
	err := readDLQFile(dlqPath, func(m cdc.Record) bool {
		var hs []cdc.Header
		for _, h := range m.Headers {
			if !cdc.IsReasonHeader(h.Key) {
				hs = append(hs, h)
			}
		}
		b, err := fileLine(m, hs)
		if err != nil {
			encErr = err
			return false
		}
		lines = append(lines, b)
		return true
	})
	if err = errors.Join(err, encErr); err != nil || len(lines) == 0 {
		return 0, err
	}
	if err := appendSynced(toPath, lines...); err != nil {
		return 0, fmt.Errorf("replay dead letters: %w", err)
	}
	if err := os.Truncate(dlqPath, 0); err != nil {
		return len(lines), fmt.Errorf("replayed %d dead letters to %s but could not empty %s (delete it, or the next replay repeats them): %w", len(lines), toPath, dlqPath, err)
	}
	return len(lines), nil
}

// Purge empties the dead-letter file and returns how many dead letters it
// held.
func (d *DeadLetterFile) Purge(_ context.Context) (int64, error) {
	path := d.path
	var n int64
	if err := readDLQFile(path, func(cdc.Record) bool { n++; return true }); err != nil || n == 0 {
		return 0, err
	}
	if err := os.Truncate(path, 0); err != nil {
		return 0, fmt.Errorf("purge %s: %w", path, err)
	}
	return n, nil
}

// readDLQFile calls fn with each line's message, in order, until fn
// returns false. A missing file has no lines.
func readDLQFile(path string, fn func(cdc.Record) bool) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open dead-letter file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	// A dead letter carries the whole original value; Kafka's default
	// message.max.bytes is 1 MiB, but a file source has no such cap.
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	var line int64
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		m := ParseLine(sc.Bytes(), line)
		m.Offset = line
		if !fn(m) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s line %d: %w", path, line+1, err)
	}
	return nil
}

// fileDeadLetter parses the reason headers of one dead-letter line.
func fileDeadLetter(m cdc.Record) cdc.DeadLetter {
	d := cdc.NewDeadLetter(cdc.Record{Raw: cdc.Raw{Offset: m.Offset, Key: m.Key, Value: m.Value, Headers: m.Headers}})
	for _, h := range m.Headers {
		if h.Key == cdc.HeaderErrTimestamp {
			if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				d.Timestamp = time.UnixMilli(ms)
			}
		}
	}
	return d
}
