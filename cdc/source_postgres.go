package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// PostgresConfig configures the logical replication source.
type PostgresConfig struct {
	// URL is the source database (the document database, not the index).
	// The role needs REPLICATION (or superuser) and, to create the
	// publication, ownership of the tables. Required.
	URL string
	// Publication is the publication to stream. If it does not exist it is
	// created FOR TABLE Tables. Defaults to "ragsync".
	Publication string
	// Slot is the logical replication slot, created with the pgoutput plugin
	// if absent. Defaults to "ragsync".
	Slot string
	// Tables are the "schema.table" names the publication is created for
	// when it does not exist. Ignored when it does.
	Tables []string
	// InitialLoad reads the published tables as op "r" changes when the slot
	// is new (in the snapshot the slot exported), or when an earlier load
	// did not finish. Defaults to false here; the CLI turns it on.
	InitialLoad bool
	// LoadState remembers which slots finished their initial load, so a
	// crash during the load resumes it and a finished load is not redone.
	// Nil keeps it in memory (every process start with a new slot loads).
	LoadState LoadState
	// StopAtEnd makes Fetch return io.EOF once every change committed
	// before the source's WAL position at start is handed over and
	// acknowledged (serve --once). Defaults to false: stream for ever.
	StopAtEnd bool
	// BatchSize is the most changes handed over at once. Defaults to 512.
	BatchSize int
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
	// Logger receives start, stop, reconnect and slot warnings. Nil discards.
	Logger *slog.Logger
	// Registerer receives the source's metrics. Nil registers nothing.
	Registerer prometheus.Registerer
}

func (c PostgresConfig) withDefaults() PostgresConfig {
	if c.Publication == "" {
		c.Publication = "ragsync"
	}
	if c.Slot == "" {
		c.Slot = "ragsync"
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 512
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
	if c.LoadState == nil {
		c.LoadState = &memoryLoadState{}
	}
	return c
}

// LoadState records finished initial loads per slot.
type LoadState interface {
	LoadDone(ctx context.Context, slot string) (bool, error)
	MarkLoadDone(ctx context.Context, slot string) error
	ForgetLoad(ctx context.Context, slot string) error
	// LoadProgress returns where an unfinished load of slot stopped (zero:
	// from the start) and SaveLoadProgress records it.
	LoadProgress(ctx context.Context, slot string) (LoadProgress, error)
	SaveLoadProgress(ctx context.Context, slot string, p LoadProgress) error
}

type memoryLoadState struct{ done, progress sync.Map }

func (m *memoryLoadState) LoadProgress(_ context.Context, slot string) (LoadProgress, error) {
	p, _ := m.progress.Load(slot)
	lp, _ := p.(LoadProgress)
	return lp, nil
}

func (m *memoryLoadState) SaveLoadProgress(_ context.Context, slot string, p LoadProgress) error {
	m.progress.Store(slot, p)
	return nil
}

func (m *memoryLoadState) LoadDone(_ context.Context, slot string) (bool, error) {
	_, ok := m.done.Load(slot)
	return ok, nil
}

func (m *memoryLoadState) MarkLoadDone(_ context.Context, slot string) error {
	m.done.Store(slot, true)
	return nil
}

func (m *memoryLoadState) ForgetLoad(_ context.Context, slot string) error {
	m.done.Delete(slot)
	m.progress.Delete(slot)
	return nil
}

// PostgresSource streams row changes from a logical replication slot
// (pgoutput, protocol version 2 with streaming of large transactions).
//
// One goroutine owns the replication connection: it decodes, assembles
// transactions and keeps the standby status flowing (on time, and at once
// when the server asks), even while the pipeline is busy with a batch, so
// that wal_sender_timeout never fires behind a slow embedder. A batch's Ack
// confirms the end LSN of the last transaction it completes; the server
// resends everything after the confirmed position after a crash, and version
// fencing makes the resent changes no-ops. Fetch and Ack are called from one
// goroutine (the pipeline's); Close from any.
type PostgresSource struct {
	cfg    PostgresConfig
	log    *slog.Logger
	db     string
	out    chan fetched
	cancel context.CancelFunc
	done   chan struct{}

	acked     atomic.Uint64 // every change up to this LSN is in the sink
	unacked   atomic.Int64  // batches handed over but not acknowledged yet
	ackNow    chan struct{}
	lag       lagTracker
	health    slotHealth
	reconnect atomic.Int64
	metrics   slotMetrics
	pkeys     map[string][]string // "schema.table" → primary key columns
	stopAt    pglogrepl.LSN       // with StopAtEnd: the WAL position at start
}

type fetched struct {
	b   Batch
	err error
}

// NewPostgresSource checks the source (wal_level, publication, replica
// identities, the slot), creates what is missing and starts streaming. It
// returns one error naming every problem found and its fix. Close stops it.
func NewPostgresSource(ctx context.Context, cfg PostgresConfig) (*PostgresSource, error) {
	if cfg.URL == "" {
		return nil, errors.New("source.postgres.url: set the URL of the source database, e.g. postgres://app@db:5432/app")
	}
	cfg = cfg.withDefaults()
	s := &PostgresSource{
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
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.run(rctx, st) }()
	go func() { defer wg.Done(); s.monitor(rctx) }()
	go func() { wg.Wait(); close(s.done) }()
	return s, nil
}

// Close stops streaming and closes the connections. Batches not yet
// acknowledged are resent by the server at the next start.
func (s *PostgresSource) Close() {
	s.cancel()
	<-s.done
}

// Fetch returns the next batch of changes, waiting for one.
func (s *PostgresSource) Fetch(ctx context.Context) (Batch, error) {
	select {
	case <-ctx.Done():
		return Batch{}, ctx.Err()
	case f, ok := <-s.out:
		if !ok {
			return Batch{}, errors.New("postgres source stopped")
		}
		return f.b, f.err
	}
}

// batch wraps msgs; its Ack confirms upTo (0: the batch completes no
// transaction, so it confirms nothing new).
func (s *PostgresSource) batch(msgs []Message, upTo pglogrepl.LSN, after func(context.Context) error) Batch {
	s.unacked.Add(1)
	return Batch{Messages: msgs, Ack: func(ctx context.Context) error {
		if after != nil {
			if err := after(ctx); err != nil {
				return err
			}
		}
		for {
			cur := s.acked.Load()
			if uint64(upTo) <= cur || s.acked.CompareAndSwap(cur, uint64(upTo)) {
				break
			}
		}
		s.lag.confirm(pglogrepl.LSN(s.acked.Load()))
		s.unacked.Add(-1)
		select {
		case s.ackNow <- struct{}{}:
		default:
		}
		return nil
	}}
}

// emit hands a batch to Fetch, or gives up when ctx ends.
func (s *PostgresSource) emit(ctx context.Context, b Batch) bool {
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
// failure that a reconnect cannot fix (the slot is gone or invalidated) is
// handed to Fetch, which stops the pipeline.
func (s *PostgresSource) run(ctx context.Context, st *setupResult) {
	defer close(s.out)
	if st.load != nil {
		if err := s.initialLoad(ctx, st); err != nil {
			st.close()
			s.fail(ctx, fmt.Errorf("initial load: %w", err))
			return
		}
	}
	s.log.Info("streaming", "from_lsn", st.start.String(), "publication", s.cfg.Publication)
	conn := st.repl
	backoff := 500 * time.Millisecond
	for {
		var err error
		if conn == nil {
			conn, err = s.connectReplication(ctx)
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
		if perm := (*slotError)(nil); errors.As(err, &perm) {
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
func (s *PostgresSource) fail(ctx context.Context, err error) {
	select {
	case s.out <- fetched{err: err}:
	case <-ctx.Done():
	}
}

// slotError is a failure of the slot itself: reconnecting does not help.
type slotError struct{ msg string }

func (e *slotError) Error() string { return e.msg }

// Permanent reports true.
func (e *slotError) Permanent() bool { return true }

// connectReplication opens a replication=database connection.
func (s *PostgresSource) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("source.postgres.url: %w", err)
	}
	sessionParams(cfg.RuntimeParams, s.cfg.ApplicationName)
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
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
	p["DateStyle"] = "ISO, MDY"
	p["TimeZone"] = "UTC"
	p["IntervalStyle"] = "postgres"
	p["bytea_output"] = "hex"
	p["extra_float_digits"] = "1"
}
