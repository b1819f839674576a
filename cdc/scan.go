package cdc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ScanValues calls fn with each message of r as soon as it is complete, with
// the number of the line it starts on. A message is one line holding a JSON
// value, or — as Debezium's docs show them — a pretty-printed value over
// several lines: a line that is not JSON alone and starts with '{' or '['
// opens one, continued until the lines read so far form a value. A line
// that is JSON on its own and starts in column 0 closes an unfinished value
// (reported as a bad message), so one broken line never swallows the rest.
// Read errors, including a line longer than maxLine, are returned with the
// line number.
func ScanValues(r io.Reader, maxLine int, fn func(line int, v []byte) error) error {
	sc := bufio.NewScanner(r)
	// The limit is the larger of maxLine and the first buffer's capacity.
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine)), maxLine)
	var pending []byte
	start, n := 0, 0
	flushPending := func() error {
		if len(pending) == 0 {
			return nil
		}
		v := bytes.TrimSpace(pending)
		pending = pending[:0]
		return fn(start, v)
	}
	for sc.Scan() {
		n++
		raw := sc.Bytes()
		l := bytes.TrimSpace(raw)
		if len(l) == 0 {
			continue
		}
		alone := json.Valid(l)
		if len(pending) > 0 {
			if alone && len(raw) > 0 && raw[0] != ' ' && raw[0] != '\t' {
				if err := flushPending(); err != nil {
					return err
				}
			} else {
				if len(pending)+len(raw) > maxLine {
					return fmt.Errorf("read line %d: a value starting there is longer than %d bytes", start, maxLine)
				}
				pending = append(append(pending, '\n'), raw...)
				if json.Valid(pending) {
					var buf bytes.Buffer
					if err := json.Compact(&buf, pending); err != nil {
						return err
					}
					pending = pending[:0]
					if err := fn(start, buf.Bytes()); err != nil {
						return err
					}
				}
				continue
			}
		}
		if !alone && (l[0] == '{' || l[0] == '[') {
			start = n
			pending = append(pending[:0], raw...)
			continue
		}
		if err := fn(n, l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("read line %d: longer than %d bytes (one message a line is expected)", n+1, maxLine)
		}
		return fmt.Errorf("read line %d: %w", n+1, err)
	}
	return flushPending()
}
