package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/registry"
)

func newInspectCmd(g *globals) *cobra.Command {
	var (
		topics, brokers []string
		registryURL     string
		max             int
	)
	cmd := &cobra.Command{
		Use:   "inspect [FILE]",
		Short: "Decode Debezium messages and print the normalised changes as JSON lines",
		Long: `inspect decodes Debezium messages from FILE (or stdin) — one JSON value a line,
as a bare value, a {"key":…,"value":…} object or kcat's -J envelope; a file that
holds pretty-printed JSON values one after another works too — and prints one
line per message: the normalised change, the reason it is skipped, or the
decode error. It exits non-zero if any message failed to decode. It needs no
database; tables[].id from --config decide document keys.

With --topic it reads the topics from Kafka instead, from the start of each
partition to the end it had when inspect began (or --max records), without a
consumer group, so it commits nothing: check a topic before pointing serve at
it. Records written with the Avro, Protobuf or JSON Schema converter decode
through the schema registry (--registry, else source.kafka.registry with its
credentials), and each line names the schema (id, type, subject, version).`,
		Example: `  ragsync inspect events.jsonl
  kcat -C -J -b localhost:9092 -t dbserver1.public.articles -e | ragsync inspect
  ragsync inspect --brokers localhost:29092 --registry http://localhost:8081 --topic dbserver2.public.articles --max 20`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.load()
			if err != nil {
				return err
			}
			rc := cfg.SchemaRegistry()
			if registryURL != "" {
				rc.URL = registryURL
			}
			var reg *registry.Registry
			dc := cfg.DecoderConfig()
			if rc.URL != "" {
				if reg, err = registry.New(rc); err != nil {
					return err
				}
				dc.Schemas = reg
			}
			dec := cdc.NewDecoder(dc)
			failed := 0
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			ctx := cmd.Context()
			show := func(line int, m cdc.Record) error {
				ch, err := dec.DecodeContext(ctx, m)
				out := inspectLine{Line: line, Schema: describeFramed(ctx, reg, m.Value)}
				if line == 0 {
					out.Coord = &cdc.Coord{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
				}
				var skip *cdc.SkipError
				switch {
				case errors.Is(err, cdc.ErrRegistryUnavailable):
					return fmt.Errorf("inspect: %w (check --registry or source.kafka.registry)", err)
				case errors.As(err, &skip):
					out.Skip = skip.Reason
				case err != nil:
					failed++
					out.Error = err.Error()
				default:
					if out.Schema == nil {
						return enc.Encode(ch) // a JSON record prints as it always has
					}
					out.Change, out.Line, out.Coord = &ch, 0, nil
				}
				return enc.Encode(out)
			}
			if len(topics) > 0 {
				if len(args) > 0 {
					return errors.New("inspect: give FILE or --topic, not both")
				}
				if len(brokers) == 0 {
					brokers = cfg.Source.Kafka.Brokers
				}
				if len(brokers) == 0 {
					return errors.New("inspect: --topic needs --brokers (or source.kafka.brokers in --config)")
				}
				err = topicRecords(ctx, brokers, topics, max, func(m cdc.Record) error { return show(0, m) })
			} else {
				err = inspectLines(ctx, cmd, args, show)
			}
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d message(s) failed to decode", failed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&topics, "topic", nil, "read this Kafka topic (repeatable) from its start to its current end instead of FILE")
	f.StringSliceVar(&brokers, "brokers", nil, "Kafka brokers for --topic, host:port (default source.kafka.brokers)")
	f.StringVar(&registryURL, "registry", "", "schema registry URL for Avro, Protobuf and JSON Schema records (default source.kafka.registry.url)")
	f.IntVar(&max, "max", 0, "with --topic, stop after this many records (0: read to the end)")
	return cmd
}

// inspectLines reads FILE (or stdin) as JSON values and prints each.
func inspectLines(_ context.Context, cmd *cobra.Command, args []string, show func(int, cdc.Record) error) error {
	in := cmd.InOrStdin()
	if len(args) == 1 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	// Each message is printed as soon as it is read, so a live
	// `kcat -C -J | ragsync inspect` shows changes as they come.
	return cdc.ScanValues(in, inspectMaxLine, func(line int, v []byte) error {
		return show(line, file.ParseLine(v, int64(line)))
	})
}

// inspectMaxLine bounds one input line (and one pretty-printed value).
var inspectMaxLine = 64 << 20
