package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
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
			err = cdc.ScanValues(in, inspectMaxLine, func(line int, v []byte) error {
				m := file.ParseLine(v, int64(line))
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
