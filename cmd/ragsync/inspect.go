package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
)

func newInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect [FILE]",
		Short: "Decode Debezium messages and print the normalised changes as JSON lines",
		Long: `inspect decodes Debezium messages from FILE (or stdin) — one JSON value a line,
as a bare value, a {"key":…,"value":…} object or kcat's -J envelope; a file that
holds pretty-printed JSON values one after another works too — and prints one
line per message: the normalised change, the reason it is skipped, or the
decode error. It exits non-zero if any message failed to decode. It needs no
database; tables[].id from --config decide document keys.`,
		Example: `  ragsync inspect events.jsonl
  kcat -C -J -b localhost:9092 -t dbserver1.public.articles -e | ragsync inspect`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			in := cmd.InOrStdin()
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			dec := cdc.NewDecoder(cfg.DecoderConfig())
			failed := 0
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			// Each message is printed as soon as it is read, so a live
			// `kcat -C -J | ragsync inspect` shows changes as they come.
			err = scanValues(in, inspectMaxLine, func(line int, v []byte) error {
				m := cdc.ParseLine(v, int64(line))
				ch, err := dec.Decode(m)
				var skip *cdc.SkipError
				switch {
				case errors.As(err, &skip):
					return enc.Encode(map[string]any{"line": line, "skip": skip.Reason})
				case err != nil:
					failed++
					return enc.Encode(map[string]any{"line": line, "error": err.Error()})
				default:
					return enc.Encode(ch)
				}
			})
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d message(s) failed to decode", failed)
			}
			return nil
		},
	}
}

// inspectMaxLine bounds one input line (and one pretty-printed value).
var inspectMaxLine = 64 << 20

// scanValues calls fn with each message of r as soon as it is complete, with
// the number of the line it starts on. A message is one line holding a JSON
// value, or — as Debezium's docs show them — a pretty-printed value over
// several lines: a line that is not JSON alone and starts with '{' or '['
// opens one, continued until the lines read so far form a value. A line
// that is JSON on its own and starts in column 0 closes an unfinished value
// (reported as a bad message), so one broken line never swallows the rest.
// Read errors, including a line longer than maxLine, are returned with the
// line number.
func scanValues(r io.Reader, maxLine int, fn func(line int, v []byte) error) error {
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
