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
			raw, err := io.ReadAll(in)
			if err != nil {
				return err
			}
			dec := cdc.NewDecoder(cfg.decoderConfig())
			failed := 0
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			for i, v := range splitValues(raw) {
				m := cdc.ParseLine(v, int64(i+1))
				ch, err := dec.Decode(m)
				var skip *cdc.SkipError
				switch {
				case errors.As(err, &skip):
					err = enc.Encode(map[string]any{"line": i + 1, "skip": skip.Reason})
				case err != nil:
					failed++
					err = enc.Encode(map[string]any{"line": i + 1, "error": err.Error()})
				default:
					err = enc.Encode(ch)
				}
				if err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d message(s) failed to decode", failed)
			}
			return nil
		},
	}
}

// splitValues returns the input's messages: one per line, unless the lines
// are not JSON each but the whole input is a stream of JSON values (pretty-
// printed messages, as Debezium's docs show them).
func splitValues(raw []byte) [][]byte {
	var lines [][]byte
	allJSON := true
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		if !json.Valid(l) {
			allJSON = false
		}
		lines = append(lines, append([]byte(nil), l...))
	}
	if allJSON {
		return lines
	}
	var values [][]byte
	d := json.NewDecoder(bytes.NewReader(raw))
	for {
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return values
			}
			return lines // not a value stream either: report per line
		}
		var buf bytes.Buffer
		if json.Compact(&buf, v) == nil {
			values = append(values, buf.Bytes())
		}
	}
}
