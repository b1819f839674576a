package pgrepl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/internal/fault"
)

// Config configures the logical replication source.
type Config struct {
	// URL is the source database (the document database, not the index).
	// The role needs REPLICATION (or superuser), SELECT on the tables and,
	// to create the publication, CREATE on the database and ownership of
	// the tables. Required.
	URL string
	// Publication is the publication to stream. If it does not exist it is
	// created FOR TABLE the tables Tables names, with
	// publish_via_partition_root. Defaults to DefaultName, or to
	// LegacyName where this deployment's records or its existing slot
	// show it uses that one.
	Publication string
	// Slot is the logical replication slot, created with the pgoutput plugin
	// if absent. Defaults to DefaultName, or to LegacyName when this
	// deployment's records show the slot of that name in the source
	// database is its own: an existing slot is never renamed.
	Slot string
	// DefaultName names the slot and the publication when Slot or
	// Publication is unset (see DefaultName, the function, which the CLI
	// uses). Defaults to LegacyName.
	DefaultName string
	// Tables are tables[]: each Match names a table as Change.Table does
	// (cdc.TableName: "schema.table", '%' written %25, '/' %2F and a '.' in
	// the schema %2E; path.Match metacharacters escaped with '\'), and ID
	// its document id columns (default: the primary key). Only literal
	// names can create the publication or be added to it; patterns select
	// among the tables an existing publication holds.
	Tables []cdc.TableConfig
	// TextColumns are the columns each tables[] entry's text template
	// names, by Match. A table that lacks one (renamed or dropped under the
	// template) is warned about at start and when a schema change reaches
	// the stream: its documents would render without it.
	TextColumns map[string][]string
	// InitialLoad reads the tables as op "r" changes when the slot is new
	// (in the snapshot the slot exported), or when an earlier load did not
	// finish, or when a table joins the publication. Defaults to false
	// here; the CLI turns it on.
	InitialLoad bool
	// State records initial loads and what this source created in the
	// source database. Nil keeps it in memory (every process start with a
	// new slot loads; slot drop then drops nothing without force).
	State State
	// StopAtEnd makes Fetch return io.EOF once every change committed
	// before the source's WAL position at start is handed over and
	// acknowledged (serve --once). Defaults to false: stream for ever.
	StopAtEnd bool
	// BatchSize is the most changes handed over at once. Defaults to 512.
	BatchSize int
	// MaxBufferBytes bounds the row data read from the server and not yet
	// handed to Fetch (plus at most one row): reading stops there until the
	// pipeline takes a batch. A batch holds at most a quarter of it.
	// Transactions of any size stream through in this bound, because the
	// server is not asked to stream transactions in progress: it decodes
	// a transaction once it committed (spilling to its own pg_replslot
	// directory beyond logical_decoding_work_mem) and every row is final
	// when it arrives. Defaults to 32 MiB.
	MaxBufferBytes int
	// StatusInterval is how often the standby status (the confirmed LSN)
	// is sent when the server does not ask sooner. It must stay well below
	// the server's wal_sender_timeout (default 60s). Defaults to 10s.
	StatusInterval time.Duration
	// ApplicationName names ragsync's connections in pg_stat_activity.
	// Defaults to "ragsync".
	ApplicationName string
	// MaxRetainedWALBytes is the retained WAL past which a warning is
	// logged at every slot check. 0 disables the warning. Defaults to 0
	// here; the CLI sets 1 GiB.
	MaxRetainedWALBytes int64
	// HealthInterval is how often the slot's retained WAL and status are
	// read. Defaults to 15s.
	HealthInterval time.Duration
	// Index lists the index's documents of a table, so that a load read
	// from one snapshot can delete the documents whose rows are gone. Nil:
	// loads do not reconcile.
	Index Index
	// ReconcileLimit bounds what a load's reconcile may delete of a table's
	// documents; past it nothing is deleted and the load says why.
	// Defaults to cdc.DefaultReconcileLimit (the zero value is read as it).
	ReconcileLimit cdc.ReconcileLimit
	// AdoptMove accepts a source database that answers with another
	// identity than the slot's loads recorded (a dump/restore, an upgrade,
	// another server): the tables are loaded again and the load's reconcile
	// replaces the old identity's documents. Without it such a start is
	// refused, since the old server's positions say nothing about the new
	// one's.
	AdoptMove bool
	// DLQPath is the dead-letter file of this source; the changes `ragsync
	// dlq replay` queued beside it (ReplayPath) are applied at start.
	// Empty: none.
	DLQPath string
	// Logger receives start, stop, reconnect and slot warnings. Nil discards.
	Logger *slog.Logger
	// Registerer receives the source's metrics. Nil registers nothing.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.BatchSize <= 0 {
		c.BatchSize = 512
	}
	if c.MaxBufferBytes <= 0 {
		c.MaxBufferBytes = 32 << 20
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 10 * time.Second
	}
	if c.HealthInterval <= 0 {
		c.HealthInterval = 15 * time.Second
	}
	if c.ApplicationName == "" {
		c.ApplicationName = "ragsync"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.State == nil {
		c.State = NewMemoryState()
	}
	if c.ReconcileLimit == (cdc.ReconcileLimit{}) {
		c.ReconcileLimit = cdc.DefaultReconcileLimit
	}
	return c
}

// Index is what a load asks the index: every live document of table,
// with its version. sink.Store implements it.
type Index interface {
	LiveVersions(ctx context.Context, table string, fn func(key string, v cdc.Version) error) error
}

// Source streams row changes from a logical replication slot (pgoutput,
// protocol version 2, transactions decoded once committed) as cdc.Change
// values, after loading the tables when that is due.
//
// One goroutine owns the replication connection: it decodes and keeps the
// standby status flowing (on time, and at once when the server asks), even
// while the pipeline is busy, so that wal_sender_timeout never fires behind
// a slow embedder. Fetch may be called again before earlier batches are
// acknowledged; their Ack funcs must be called in the order the batches
// were fetched. A batch's Ack confirms the end LSN of the last transaction
// it completes; the server resends everything after the confirmed position
// after a crash, and version fencing makes the resent changes no-ops.
// Fetch, Ack and Close may be called from different goroutines.
type Source struct {
	cfg Config
	log *slog.Logger
	db  string
	// source names this database's stream (cdc.PostgresSource): every
	// version the source hands over carries it.
	source string
	out    chan fetched
	cancel context.CancelFunc
	done   chan struct{}

	acked     atomic.Uint64 // every change up to this LSN is in the sink
	unacked   atomic.Int64  // batches handed over but not acknowledged yet
	ackNow    chan struct{}
	lag       lagTracker
	health    slotHealth
	load      loadProgress
	reconnect atomic.Int64
	metrics   slotMetrics
	tables    map[string]*tableInfo // by (schema, table) of the publication
	stopAt    pglogrepl.LSN         // with StopAtEnd: the WAL position at start
	warned    sync.Map              // Change.Table → the missing columns last warned about
	// created lists what this start created (KindPublication, KindSlot),
	// for Abandon; acks counts acknowledged batches.
	created []string
	acks    atomic.Int64
	// marks holds what the watermark says beside the acknowledged LSN.
	marks slotMarks
}

type fetched struct {
	b   cdc.Batch
	err error
}

// New checks the source (wal_level, privileges, the publication, replica
// identities and document ids, the slot), and only when every check passed
// creates what is missing, undoing it if a later step fails; then it starts
// streaming. It returns one error naming every problem found and its fix.
// Close stops it.
func New(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.URL == "" {
		return nil, errors.New("source.postgres.url: set the URL of the source database, e.g. postgres://app@db:5432/app")
	}
	cfg = cfg.withDefaults()
	if cfg.Slot == "" || cfg.Publication == "" {
		var err error
		if cfg, err = resolveConfigNames(ctx, cfg); err != nil {
			return nil, err
		}
	}
	s := &Source{
		cfg:    cfg,
		log:    cfg.Logger.With("stage", "source", "slot", cfg.Slot),
		out:    make(chan fetched, 2),
		done:   make(chan struct{}),
		ackNow: make(chan struct{}, 1),
	}
	if cfg.Registerer != nil {
		if err := s.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	st, err := s.setup(ctx)
	if err != nil {
		return nil, err
	}
	// Recorded at every start, so that deployments started before the
	// record existed gain it too. Without it a drop by another deployment
	// only keeps a publication it might otherwise drop: not worth failing
	// the start.
	if err := cfg.State.RecordStream(ctx, s.db, cfg.Slot, cfg.Publication); err != nil {
		s.log.Warn("could not record which publication the slot streams; `ragsync slot drop` of another deployment on this database will keep the publication rather than guess", "publication", cfg.Publication, "error", err)
	}
	if st.load != nil {
		// Not ready from the start: a load resumed after its first tables
		// counts those as read.
		rec := st.load.rec
		s.load.start(max(slices.Index(rec.Pending, rec.Table), 0), len(rec.Pending))
	}
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.run(rctx, st) }()
	go func() { defer wg.Done(); s.monitor(rctx) }()
	go func() { defer wg.Done(); s.readClock(rctx) }()
	go func() { wg.Wait(); close(s.done) }()
	return s, nil
}

// Close stops streaming and closes the connections. Batches not yet
// acknowledged are resent by the server at the next start.
func (s *Source) Close() {
	s.cancel()
	<-s.done
}

// Abandon is Close for a caller whose own start-up failed after New: when
// no batch was acknowledged yet, it also drops the slot and the
// publication that this start created, as a start that fails inside New
// does, so a failed first start leaves no slot holding WAL and no
// publication behind. Otherwise it only closes.
func (s *Source) Abandon() {
	s.Close()
	if len(s.created) == 0 || s.acks.Load() > 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := s.connectSQL(ctx)
	if err != nil {
		s.log.Error("could not undo what this failed start created: drop it by hand", "created", s.created, "error", err)
		return
	}
	defer conn.Close(context.Background())
	for i := len(s.created) - 1; i >= 0; i-- {
		s.dropCreated(conn, s.created[i])
	}
	s.created = nil
}

// Fetch returns the next batch of changes, waiting for one.
func (s *Source) Fetch(ctx context.Context) (cdc.Batch, error) {
	select {
	case <-ctx.Done():
		return cdc.Batch{}, ctx.Err()
	case f, ok := <-s.out:
		if !ok {
			return cdc.Batch{}, errors.New("postgres source stopped")
		}
		return f.b, f.err
	}
}

// batch wraps msgs; its Ack confirms upTo (0: the batch completes no
// transaction, so it confirms nothing new). after runs first, in Ack, so
// what it records is written only once every change before it is applied.
func (s *Source) batch(msgs []cdc.Record, upTo pglogrepl.LSN, after func(context.Context) error) cdc.Batch {
	s.unacked.Add(1)
	return cdc.Batch{Records: msgs, Ack: func(ctx context.Context) error {
		s.acks.Add(1)
		if after != nil {
			if err := after(ctx); err != nil {
				return err
			}
		}
		s.advance(upTo)
		if ts := s.lag.confirm(pglogrepl.LSN(s.acked.Load())); !ts.IsZero() {
			s.marks.committed(ts)
		}
		s.unacked.Add(-1)
		select {
		case s.ackNow <- struct{}{}:
		default:
		}
		return nil
	}}
}

// advance moves the acknowledged position to lsn if that is further.
func (s *Source) advance(lsn pglogrepl.LSN) {
	for {
		cur := s.acked.Load()
		if uint64(lsn) <= cur || s.acked.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

// emit hands a batch to Fetch, or gives up when ctx ends.
func (s *Source) emit(ctx context.Context, b cdc.Batch) bool {
	select {
	case s.out <- fetched{b: b}:
		return true
	case <-ctx.Done():
		s.unacked.Add(-1)
		return false
	}
}

// run loads the tables if needed, then streams, reconnecting with backoff
// after a lost connection (a terminated walsender, a server restart). A
// failure that a reconnect cannot fix (the slot or the publication is gone,
// a privilege was revoked) is handed to Fetch, which stops the pipeline.
func (s *Source) run(ctx context.Context, st *setupResult) {
	defer close(s.out)
	if st.load != nil {
		if err := s.initialLoad(ctx, st); err != nil {
			st.close()
			s.fail(ctx, fmt.Errorf("initial load: %w", err))
			return
		}
	}
	if err := s.replay(ctx); err != nil {
		st.close()
		s.fail(ctx, err)
		return
	}
	s.log.Info("streaming", "from_lsn", st.start.String(), "publication", s.cfg.Publication)
	conn := st.repl
	backoff := 500 * time.Millisecond
	for {
		var err error
		if conn == nil {
			// A refused login (REPLICATION revoked) is named with its fix
			// like a refused START_REPLICATION; a server that is down is
			// retried.
			if conn, err = s.connectReplication(ctx); err != nil {
				err = s.classify(ctx, err)
			}
		}
		if err == nil {
			start := max(st.start, pglogrepl.LSN(s.acked.Load()))
			err = s.stream(ctx, conn, start)
			conn.Close(context.Background())
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errStopAtEnd) {
			s.fail(ctx, io.EOF)
			return
		}
		if perm := (*SourceError)(nil); errors.As(err, &perm) {
			s.health.set(perm.Error())
			s.fail(ctx, err)
			return
		}
		s.reconnect.Add(1)
		s.log.Warn("replication connection lost; reconnecting", "error", err, "backoff", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// fail hands err to Fetch, unless the source is closing.
func (s *Source) fail(ctx context.Context, err error) {
	select {
	case s.out <- fetched{err: err}:
	case <-ctx.Done():
	}
}

// connectReplication opens a replication=database connection.
func (s *Source) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("source.postgres.url: %w", err)
	}
	sessionParams(cfg.RuntimeParams, s.cfg.ApplicationName)
	cfg.RuntimeParams["replication"] = "database"
	conn, err := fault.Reconnect(ctx, reconnectWithin, func() (*pgconn.PgConn, error) { return pgconn.ConnectConfig(ctx, cfg) })
	if err != nil {
		return nil, fmt.Errorf("connect for replication: %w", err)
	}
	return conn, nil
}

// sessionParams fixes the output formats the value decoder expects, on the
// replication connection (pgoutput formats values in the walsender) and on
// the snapshot reader alike.
func sessionParams(p map[string]string, app string) {
	p["application_name"] = app
	cdc.PostgresSessionParams(p)
}

// warnMissingColumns logs, once per table and set of columns, that the
// table lacks columns its text template names.
func (s *Source) warnMissingColumns(schema, table, name string, cols []string) {
	tc, ok := cdc.LookupTable(s.cfg.Tables, name)
	if !ok {
		return
	}
	var missing []string
	for _, c := range s.cfg.TextColumns[tc.Match] {
		if !slices.Contains(cols, c) && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
	}
	key := strings.Join(missing, ",")
	if prev, ok := s.warned.Load(name); (ok && prev == key) || (!ok && key == "") {
		return
	}
	s.warned.Store(name, key)
	if key == "" {
		return
	}
	s.log.Warn("a table lacks columns its tables[].text template names (renamed or dropped?): its documents render without them",
		"table", pgx.Identifier{schema, table}.Sanitize(), "missing_columns", missing, "columns", cols,
		"fix", "name the table's current columns in tables[].text; after a rename, `ragsync slot drop` and a restart reload the table with the new template")
}
