package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/ragsync/ragsync/config"
	"github.com/ragsync/ragsync/fallback"
	"github.com/ragsync/ragsync/internal/logdedup"
	"github.com/ragsync/ragsync/internal/redact"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

// globals are the flags every command shares.
type globals struct {
	configPath string
	sets       []string
	// shortcuts for the settings people change most from the command line
	postgresURL string
	index       string
	// warn receives configuration warnings (the command's stderr).
	warn io.Writer
	// red masks secrets in everything the process writes (stdout, stderr)
	// or sends (serve's dead letters, replies, events, health bodies);
	// load teaches it the configured secrets.
	red *redact.Redactor
	// stderrTTY is whether stderr is a terminal, found by main on the
	// process's stderr before it is wrapped in red's writer: it decides
	// whether progress shows as a bar or as log lines.
	stderrTTY bool
}

// newRootCmd is the command tree of a process whose stderr is not a
// terminal (tests); main says what its stderr is.
func newRootCmd() *cobra.Command { return newRoot(&globals{red: redact.New()}) }

// newRoot builds the command tree over g.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "ragsync",
		Short: "Keep a pgvector index in sync with a document database (Debezium events or Postgres logical replication)",
		Long: `ragsync keeps a pgvector index in sync with a document database. It reads
changes as Debezium change events (from Kafka, from Debezium Server's Redis
streams, or from a JSON Lines file) or straight from a Postgres database by logical replication (source.kind: postgres, no
Kafka needed), chunks each changed document, embeds only the chunks whose
content is new, and applies the result to Postgres/pgvector in one transaction
per document.

Settings come from --config (YAML), then RAGSYNC_* environment variables
(RAGSYNC_EMBEDDER_API_KEY, RAGSYNC_POSTGRES_URL, …), then flags; flags win.`,
		SilenceUsage: true,
		// Errors, logs and every command's output go through the
		// redactor: a library error may quote a URL or DSN with its
		// password, a provider's the API key, and dead letters or replies
		// written before may hold either.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			root := cmd.Root()
			root.SetErr(g.red.Writer(root.ErrOrStderr()))
			root.SetOut(g.red.Writer(root.OutOrStdout()))
			g.warn = cmd.ErrOrStderr()
			// go-redis's own pool notices ("failed to dial after 5
			// attempts") are debug lines: the command says what failed
			// and the fix; serve routes them through its logger again.
			fallback.RouteRedisLogs(newLogger(cmd.ErrOrStderr(), LogConfig{}, false))
		},
	}
	root.PersistentFlags().StringVarP(&g.configPath, "config", "c", os.Getenv("RAGSYNC_CONFIG"), "path of ragsync.yaml (env RAGSYNC_CONFIG)")
	root.PersistentFlags().StringArrayVar(&g.sets, "set", nil, "override one setting by its YAML path, e.g. --set embedder.model=text-embedding-3-large (repeatable)")
	root.PersistentFlags().StringVar(&g.postgresURL, "postgres-url", "", "Postgres URL of the index (postgres.url)")
	root.PersistentFlags().StringVar(&g.index, "index", "", "index name (index)")
	root.AddCommand(
		newServeCmd(g),
		newBackfillCmd(g),
		newReindexCmd(g),
		newIndexCmd(g),
		newQueryCmd(g),
		newInspectCmd(g),
		newMigrateCmd(g),
		newDLQCmd(g),
		newBloomCmd(g),
		newDupesCmd(g),
		newPurgeCmd(g),
		newSlotCmd(g),
		newMonitorCmd(g),
		newFidelityCmd(g),
		newRepairCmd(g),
		newVersionCmd(),
	)
	return root
}

// load reads the configuration with flags applied last.
func (g *globals) load() (Config, error) {
	sets := append([]string(nil), g.sets...)
	if g.postgresURL != "" {
		sets = append(sets, "postgres.url="+g.postgresURL)
	}
	if g.index != "" {
		sets = append(sets, "index="+g.index)
	}
	cfg, err := config.Load(g.configPath, sets)
	g.red.Add(cfg.Secrets()...)
	if err == nil && g.warn != nil {
		for _, w := range cfg.Warnings() {
			fmt.Fprintln(g.warn, "warning:", w)
		}
	}
	return Config{cfg}, err
}

// newLogger builds the process logger: JSON for serve (machines read it),
// text for interactive commands. Identical warnings repeated within 10s
// collapse into one line with a count (logdedup); flushLogs writes the
// counts still held when the command ends.
func newLogger(w io.Writer, cfg LogConfig, json bool) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(strings.ToUpper(orDefault(cfg.Level, "info"))))
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch {
	case cfg.Format == "json" || (cfg.Format == "" && json):
		h = slog.NewJSONHandler(w, opts)
	default:
		h = slog.NewTextHandler(w, opts)
	}
	d := logdedup.New(h, logdedup.Config{})
	loggersMu.Lock()
	loggers = append(loggers, d)
	loggersMu.Unlock()
	return slog.New(d)
}

var (
	loggersMu sync.Mutex
	loggers   []*logdedup.Handler // every logger newLogger built, for flushLogs
)

// flushLogs writes the repeat counts every logger still holds back.
func flushLogs() {
	loggersMu.Lock()
	ls := loggers
	loggers = nil
	loggersMu.Unlock()
	for _, l := range ls {
		l.Flush()
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the ragsync version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ragsync %s\n", version)
			return err
		},
	}
}
