package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/file"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/pgrepl"
	"github.com/ragsync/ragsync/cdc/redisstream"
	"github.com/ragsync/ragsync/cdc/registry"
	"github.com/ragsync/ragsync/internal/suggest"
	"github.com/ragsync/ragsync/pipeline"
	"github.com/ragsync/ragsync/sink"
)

// transport is everything that differs between the kinds of source
// (source.kind): how its source opens, with its health, lag and clean-up;
// where its dead letters go and how the dlq command opens them; and what a
// stall of its stages tells the operator to check. Nothing else in the
// service branches on the kind: it asks the entry, so the places cannot
// disagree about a transport.
type transport struct {
	// open builds the source and its dead-letter destination, with the
	// capabilities only this transport has set on the result: its lag
	// (the monitor's and the metrics'), its health (/readyz) and what a
	// failed start must drop.
	open func(ctx context.Context, cfg SourceConfig, env sourceEnv) (*source, error)
	// deadLetters opens its dead-letter stores for the dlq command;
	// action is the command's (list, replay, purge).
	deadLetters func(cfg SourceConfig, action string) ([]DeadLetters, func(), error)
	// advice names, for each pipeline stage the transport serves (its
	// acknowledgements: pipeline.StageSource; its dead-letter destination:
	// pipeline.StageDeadLetters), the settings the stall summary tells the
	// operator to check.
	advice map[string]string
}

// sourceEnv is what serve gives a transport to open its source with.
type sourceEnv struct {
	// decoder decodes the Debezium records of the Kafka, file and Redis
	// Streams sources.
	decoder cdc.DecoderConfig
	// once stops the source at the end of what it holds at start.
	once   bool
	pool   *pgxpool.Pool
	store  *sink.Store
	reg    prometheus.Registerer
	logger *slog.Logger
}

// transports are the kinds of source, by source.kind.
var transports = map[string]transport{
	"kafka": {
		open:        openKafka,
		deadLetters: kafkaDeadLetters,
		advice: map[string]string{
			pipeline.StageSource:      "source.kafka.brokers (is Kafka reachable? the group's offsets are committed there) and source.kafka.registry (is the schema registry reachable? ragsync_kafka_schema_registry_stalled says the source waits for it)",
			pipeline.StageDeadLetters: "dlq.topic and source.kafka.brokers (can ragsync create and write the dead-letter topic?)",
		},
	},
	"file": {
		open:        openFile,
		deadLetters: fileDeadLetters,
		advice: map[string]string{
			pipeline.StageSource:      "source.file.path (is the file still there and readable?)",
			pipeline.StageDeadLetters: "dlq.path (is its directory writable? by default the file beside source.file.path)",
		},
	},
	"redis-streams": {
		open:        openRedisStreams,
		deadLetters: redisStreamsDeadLetters,
		advice: map[string]string{
			pipeline.StageSource:      "source.redis_streams.url (is Redis reachable? the group's acknowledgements are kept there)",
			pipeline.StageDeadLetters: "source.redis_streams.url (can ragsync write the dead-letter streams <stream>.ragsync-dlq? is Redis at maxmemory?)",
		},
	},
	"postgres": {
		open:        openPostgres,
		deadLetters: postgresDeadLetters,
		advice: map[string]string{
			pipeline.StageSource:      "source.postgres.url (is the source database up and reachable?) and source.postgres.slot (does the replication slot still exist?)",
			pipeline.StageDeadLetters: "dlq.path (is its directory writable? by default ragsync-<source.postgres.slot>.dlq.jsonl in serve's working directory)",
		},
	},
}

// Transports are the known source kinds, sorted.
func Transports() []string { return slices.Sorted(maps.Keys(transports)) }

// transportOf is the transport of kind; an unknown kind is an error that
// lists the known ones and names the nearest.
func transportOf(kind string) (transport, error) {
	if t, ok := transports[kind]; ok {
		return t, nil
	}
	known := Transports()
	err := fmt.Errorf("source.kind: %q is not one of %s", kind, strings.Join(known, ", "))
	if s := suggest.Nearest(kind, known); s != "" {
		err = fmt.Errorf("%w; did you mean %s?", err, s)
	}
	return transport{}, err
}

// servePipelineConfig is the configuration of serve's pipeline: the
// given one, with the stall summary's advice for the source's stages (its
// acknowledgements, its dead letters) from the configured transport, so
// that a stalled source names its own settings and never another
// transport's.
func (c Config) servePipelineConfig() (PipelineConfig, error) {
	t, err := transportOf(c.Source.Kind)
	if err != nil {
		return PipelineConfig{}, err
	}
	pc := c.Pipeline
	pc.Pipeline.Settings = withAdvice(pc.Pipeline.Settings, t.advice)
	return pc, nil
}

// withAdvice is settings (the stall summary's advice per stage) with the
// transport's advice for the stages it serves; settings is not changed.
func withAdvice(settings, advice map[string]string) map[string]string {
	out := maps.Clone(settings)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, advice)
	return out
}

// openKafka opens the Kafka consumer-group source, which decodes each
// record with the configured tables' keys; its dead letters go to a topic
// beside each source topic (or dlq.topic), and it reports its lag.
func openKafka(_ context.Context, cfg SourceConfig, env sourceEnv) (*source, error) {
	kc := cfg.Kafka
	dc := env.decoder
	if cfg.Registry.URL != "" {
		reg, err := registry.New(cfg.Registry)
		if err != nil {
			return nil, err
		}
		dc.Schemas = reg
	}
	kc.Decoder = cdc.NewDecoder(dc)
	kc.StopAtEnd = env.once
	kc.Logger = env.logger.With("stage", "kafka")
	src, err := kafka.NewSource(kc)
	if err != nil {
		return nil, err
	}
	return &source{src: src, dlq: kafka.NewDeadLetters(src.Client(), cfg.DLQTopic, cfg.Version), close: src.Close,
		lag: kafkaLag{src: src, topics: kc.Topics}, collector: kafka.NewLagCollector(src)}, nil
}

// openRedisStreams opens the source of Debezium Server's Redis sink, which
// decodes each entry with the configured tables' keys; its dead letters go
// to a stream beside each source stream, and it reports its lag.
func openRedisStreams(ctx context.Context, cfg SourceConfig, env sourceEnv) (*source, error) {
	rc := cfg.RedisStreams
	rc.Decoder = cdc.NewDecoder(env.decoder)
	rc.StopAtEnd = env.once
	rc.Logger = env.logger.With("stage", "redis_streams")
	src, err := redisstream.NewSource(ctx, rc)
	if err != nil {
		return nil, err
	}
	return &source{src: src, dlq: redisstream.NewDeadLetters(src.Client(), cfg.Version), close: src.Close,
		lag: src, collector: redisstream.NewLagCollector(src)}, nil
}

// openFile opens the JSON Lines source, which decodes each line with the
// configured tables' keys; its dead letters go to a JSON Lines file.
func openFile(_ context.Context, cfg SourceConfig, env sourceEnv) (*source, error) {
	fc := cfg.File
	fc.Follow = fc.Follow && !env.once
	fc.Decoder = cdc.NewDecoder(env.decoder)
	src, err := file.NewSource(fc)
	if err != nil {
		return nil, err
	}
	return &source{src: src, dlq: file.NewDeadLetters(cfg.DLQPath, cfg.Version), close: func() { src.Close() }}, nil
}

// openPostgres opens the logical-replication source. Its initial loads and
// what it created are recorded in the index schema; dead letters go to a
// JSON Lines file; /readyz reports its slot's problems, and a failed start
// drops the slot and publication it created.
func openPostgres(ctx context.Context, cfg SourceConfig, env sourceEnv) (*source, error) {
	pc := cfg.Postgres
	pc.State, pc.Logger, pc.Registerer = SourceState(env.pool), env.logger, env.reg
	pc.Index = env.store
	pc.StopAtEnd = env.once
	pc.DLQPath = cfg.DLQPath
	src, err := pgrepl.New(ctx, pc)
	if err != nil {
		return nil, err
	}
	return &source{src: src, dlq: file.NewDeadLetters(cfg.DLQPath, cfg.Version), close: src.Close, unhealthy: src.Unhealthy, abandon: src.Abandon}, nil
}

// kafkaDeadLetters opens the dead-letter topics: dlq.topic, else
// "<topic>.ragsync-dlq" for each source topic. A replay produces each
// record back to its original topic.
func kafkaDeadLetters(cfg SourceConfig, _ string) ([]DeadLetters, func(), error) {
	brokers := cfg.Kafka.Brokers
	if len(brokers) == 0 {
		return nil, nil, errors.New("dlq: source.kafka.brokers is empty; the CDC dead letters live in Kafka (use --frontdoor for the query front door's)")
	}
	topics := []string{cfg.DLQTopic}
	if cfg.DLQTopic == "" {
		topics = topics[:0]
		for _, t := range cfg.Kafka.Topics {
			topics = append(topics, t+kafka.DLQSuffix)
		}
	}
	if len(topics) == 0 {
		return nil, nil, errors.New("dlq: no dead-letter topic: set dlq.topic or source.kafka.topics")
	}
	// A plain client: the stores read without joining a group.
	cl, err := kafka.Dial(brokers)
	if err != nil {
		return nil, nil, fmt.Errorf("dlq: connect to %v: %w", brokers, err)
	}
	stores := make([]DeadLetters, 0, len(topics))
	for _, t := range topics {
		stores = append(stores, DeadLetters{DeadLetterStore: kafka.NewDeadLetterTopic(cl, t, ""), Name: t, Topic: true,
			Replayed: func(n int) string { return fmt.Sprintf("%s: replayed %d record(s) to their original topics", t, n) }})
	}
	return stores, cl.Close, nil
}

// redisStreamsDeadLetters opens the dead-letter streams,
// "<stream>.ragsync-dlq" for each source stream. A replay adds each entry
// back to its original stream, with Debezium Server's null literals.
func redisStreamsDeadLetters(cfg SourceConfig, _ string) ([]DeadLetters, func(), error) {
	rc := cfg.RedisStreams
	if rc.URL == "" {
		return nil, nil, errors.New("dlq: source.redis_streams.url is empty; the CDC dead letters live in that Redis (use --frontdoor for the query front door's)")
	}
	if len(rc.Streams) == 0 {
		return nil, nil, errors.New("dlq: source.redis_streams.streams is empty; list the streams whose dead letters to open")
	}
	opts, err := redis.ParseURL(rc.URL)
	if err != nil {
		// Not %w: the parse error may quote the URL, password included.
		return nil, nil, errors.New("dlq: source.redis_streams.url: not a Redis URL (want redis://[user:password@]host:port/db, or rediss:// for TLS)")
	}
	opts.PoolSize = 2
	rdb := redis.NewClient(opts)
	stores := make([]DeadLetters, 0, len(rc.Streams))
	for _, s := range rc.Streams {
		name := s + redisstream.DLQSuffix
		stores = append(stores, DeadLetters{DeadLetterStore: redisstream.NewDeadLetterStream(rdb, name, "", rc.NullKey, rc.NullValue), Name: name, Stream: true,
			Replayed: func(n int) string { return fmt.Sprintf("%s: replayed %d record(s) to their original streams", name, n) }})
	}
	return stores, func() { _ = rdb.Close() }, nil
}

// fileDeadLetters opens the file source's dead-letter file; a replay
// appends to source.file.path, which only a replay needs.
func fileDeadLetters(cfg SourceConfig, action string) ([]DeadLetters, func(), error) {
	path, replayTo := cfg.DLQPath, cfg.File.Path
	if replayTo == "" && path == "" {
		return nil, nil, errors.New("dlq: source.file.path is empty; set it (or dlq.path) to find the file source's dead letters")
	}
	if action == "replay" && replayTo == "" {
		return nil, nil, errors.New("dlq replay: source.file.path is empty; set it to the file to replay into")
	}
	d := DeadLetters{DeadLetterStore: file.NewDeadLetterFile(path, replayTo), Name: path,
		Replayed: func(n int) string {
			return fmt.Sprintf("%s: replayed %d record(s) to the end of %s", path, n, replayTo)
		}}
	return []DeadLetters{d}, func() {}, nil
}

// postgresDeadLetters opens the Postgres source's dead-letter file. Replay
// moves the dead letters to the replay file beside them, which serve's
// Postgres source applies (each change at its own version, so one a later
// change superseded is skipped) before it streams, and then empties.
func postgresDeadLetters(cfg SourceConfig, _ string) ([]DeadLetters, func(), error) {
	st := pgrepl.DeadLetterFile(cfg.DLQPath)
	d := DeadLetters{DeadLetterStore: st, Name: st.Path(),
		Replayed: func(n int) string {
			return fmt.Sprintf("%s: queued %d change(s) in %s; serve applies them when it next starts (restart it if it is running)", st.Path(), n, st.ReplayTo())
		}}
	return []DeadLetters{d}, func() {}, nil
}
