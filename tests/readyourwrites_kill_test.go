package tests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/embedder"
	"github.com/ragsync/ragsync/internal/pgtest"
	"github.com/ragsync/ragsync/service"
	"github.com/ragsync/ragsync/sink"
)

// rywChange is one committed change of the read-your-writes writer: one
// transaction that creates, updates or deletes one document.
type rywChange struct {
	doc   int
	del   bool
	token string // the body's unique word (live changes)
	// lsn is pg_current_wal_lsn() read on the writer's connection right
	// after COMMIT returned, and at the test host's clock at that moment:
	// the two `after` values a reader of its own write holds.
	lsn uint64
	at  time.Time
}

// rywHistory is what the writer committed, in commit order. The writer
// runs one transaction at a time on one connection, so change i's commit
// record lies after changes[i-1].lsn and at or before changes[i].lsn: a
// stored version's commit LSN names the change it came from.
type rywHistory struct {
	mu      sync.Mutex
	start   uint64 // the position before the first change
	changes []rywChange
}

func (h *rywHistory) add(c rywChange) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, c)
	return len(h.changes) - 1
}

func (h *rywHistory) snapshot() (uint64, []rywChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.start, slices.Clone(h.changes)
}

// rywReader checks, as an application reading its own writes would, that
// once the index's watermark passes a change's position (or its time) the
// index holds that change and everything committed before it.
type rywReader struct {
	ix    *service.Index
	table string // the source table as document ids name it
	hist  *rywHistory
	wait  time.Duration

	passed, timePassed, notYet, staleUnwaited, superseded atomic.Int64
	// violations by the kind of `after`: a position, or a time.
	posViolations, timeViolations atomic.Int64
}

func (r *rywReader) docID(d int) string { return sink.DocID(r.table, strconv.Itoa(d)) }

// check takes change k's `after` (its LSN, or with byTime its time), first
// reads the index without waiting (which must be able to see a state
// lacking the change, or verify could not fail), then waits with WaitAfter
// and verifies. It reports whether the wait passed and the index held
// the change.
func (r *rywReader) check(t *testing.T, ctx context.Context, k int, byTime bool) bool {
	_, hs := r.hist.snapshot()
	c := hs[k]
	text := pglogrepl.LSN(c.lsn).String()
	if byTime {
		text = c.at.UTC().Format(time.RFC3339Nano)
	}
	after, err := cdc.ParseAfter(text)
	if err != nil {
		t.Errorf("parse after %q: %v", text, err)
		return false
	}
	if v, err := r.verify(ctx, k); err == nil && len(v) > 0 {
		r.staleUnwaited.Add(1)
	}
	err = r.ix.Store.WaitAfter(ctx, after, r.wait)
	var notYet *sink.NotYetError
	switch {
	case errors.As(err, &notYet):
		// Serve was down or restarting for the whole wait: the reader is
		// told the index may not hold its write, which is no violation.
		r.notYet.Add(1)
		return false
	case err != nil:
		t.Errorf("wait for change %d after %s: %v", k, text, err)
		return false
	}
	v, err := r.verify(ctx, k)
	if err != nil {
		t.Errorf("verify change %d: %v", k, err)
		return false
	}
	if len(v) > 0 {
		if byTime {
			r.timeViolations.Add(1)
		} else {
			r.posViolations.Add(1)
		}
		t.Errorf("the watermark passed %s (change %d), yet the index lacks a change committed before it:\n%s", text, k, strings.Join(v, "\n"))
		return false
	}
	r.passed.Add(1)
	if byTime {
		r.timePassed.Add(1)
	}
	return true
}

// verify compares the index with the history up to change k: every
// document's stored state is at least as new as its last change at or
// before k (and is the change its version names), and when change k left
// its document live, a search for its token finds it. It returns what is
// wrong.
func (r *rywReader) verify(ctx context.Context, k int) ([]string, error) {
	start, hs := r.hist.snapshot()
	last := map[int]int{}
	for j := 0; j <= k; j++ {
		last[hs[j].doc] = j
	}
	before := func(j int) uint64 {
		if j == 0 {
			return start
		}
		return hs[j-1].lsn
	}
	var out []string
	for _, d := range slices.Sorted(maps.Keys(last)) {
		j := last[d]
		sd, ok, err := r.ix.Store.Document(ctx, r.docID(d))
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, fmt.Sprintf("document %d is missing; change %d (%s) committed before", d, j, describe(hs[j])))
			continue
		}
		if sd.Version.Kind != cdc.KindPostgres || len(sd.Version.Parts) == 0 {
			out = append(out, fmt.Sprintf("document %d has version %v, not a Postgres position", d, sd.Version))
			continue
		}
		commit := sd.Version.Parts[0]
		if commit <= before(j) {
			out = append(out, fmt.Sprintf("document %d holds a change committed at %s, older than change %d (%s, committed after %s)",
				d, pglogrepl.LSN(commit), j, describe(hs[j]), pglogrepl.LSN(before(j))))
			continue
		}
		// The change the stored version is: the first whose position is
		// at or past its commit. A version past every recorded position is
		// a change the writer has not recorded yet: newer still.
		i := sort.Search(len(hs), func(i int) bool { return hs[i].lsn >= commit })
		if i == len(hs) {
			continue
		}
		switch x := hs[i]; {
		case x.doc != d:
			out = append(out, fmt.Sprintf("document %d holds version %s, the commit of change %d of document %d", d, pglogrepl.LSN(commit), i, x.doc))
		case sd.Deleted != x.del:
			out = append(out, fmt.Sprintf("document %d: deleted=%v, but its version is change %d (%s)", d, sd.Deleted, i, describe(x)))
		case !x.del && !strings.Contains(fmt.Sprint(sd.Row["body"]), x.token):
			out = append(out, fmt.Sprintf("document %d: body %q lacks the token of its version, change %d (%s)", d, sd.Row["body"], i, describe(x)))
		}
	}
	if c := hs[k]; !c.del {
		found, err := r.searchFinds(ctx, c)
		if err != nil {
			return nil, err
		}
		if !found {
			// A later change of the document may have replaced the token
			// since: then the search owes nothing.
			sd, ok, err := r.ix.Store.Document(ctx, r.docID(c.doc))
			if err != nil {
				return nil, err
			}
			if ok && len(sd.Version.Parts) > 0 && sd.Version.Parts[0] > c.lsn {
				r.superseded.Add(1)
			} else {
				out = append(out, fmt.Sprintf("a search for %q (change %d, document %d) does not find it", c.token, k, c.doc))
			}
		}
	}
	return out, nil
}

// searchFinds searches the index with the token's vector from serve's
// embedder (the index's own, hashing) and reports whether a hit is c's
// document holding the token.
func (r *rywReader) searchFinds(ctx context.Context, c rywChange) (bool, error) {
	vecs, err := r.ix.Emb.Embed(ctx, []string{c.token})
	if err != nil {
		return false, err
	}
	hits, err := r.ix.Store.Search(ctx, vecs[0], sink.Query{K: 5})
	if err != nil {
		return false, err
	}
	for _, h := range hits {
		if h.DocID == r.docID(c.doc) && strings.Contains(h.Text, c.token) {
			return true, nil
		}
	}
	return false, nil
}

func describe(c rywChange) string {
	if c.del {
		return fmt.Sprintf("delete of document %d at %s", c.doc, pglogrepl.LSN(c.lsn))
	}
	return fmt.Sprintf("document %d with %s at %s", c.doc, c.token, pglogrepl.LSN(c.lsn))
}

// rywToken is a word of random letters: it shares no word with any other
// document, so its vector's nearest chunk is the document holding it.
func rywToken(rnd *rand.Rand) string {
	b := make([]byte, 12)
	for i := range b {
		b[i] = byte('a' + rnd.IntN(26))
	}
	return string(b)
}

// rywWriter creates, updates and deletes documents 0..docs-1 of tbl, one
// change a transaction, until stop closes; after each commit it reads
// pg_current_wal_lsn() on the same connection, records the change and
// hands its index to checks.
func rywWriter(t *testing.T, ctx context.Context, tbl string, docs int, h *rywHistory, stop <-chan struct{}, checks chan<- int) {
	defer close(checks)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(context.Background())
	rnd := rand.New(rand.NewPCG(17, 17))
	live := map[int]bool{}
	for {
		select {
		case <-stop:
			return
		default:
		}
		c := rywChange{doc: rnd.IntN(docs)}
		var q string
		var args []any
		switch {
		case !live[c.doc]:
			c.token = rywToken(rnd)
			q, args = `INSERT INTO `+tbl+` VALUES ($1, $2, $3)`, []any{c.doc, fmt.Sprintf("Doc %d", c.doc), c.token + " " + faultWords[rnd.IntN(len(faultWords))]}
		case rnd.IntN(4) == 0:
			c.del = true
			q, args = `DELETE FROM `+tbl+` WHERE id = $1`, []any{c.doc}
		default:
			c.token = rywToken(rnd)
			q, args = `UPDATE `+tbl+` SET body = $2 WHERE id = $1`, []any{c.doc, c.token + " " + faultWords[rnd.IntN(len(faultWords))]}
		}
		tx, err := conn.Begin(ctx)
		if err == nil {
			_, err = tx.Exec(ctx, q, args...)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Errorf("writer: %s: %v", q, err)
			return
		}
		c.at = time.Now()
		var lsn string
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
			t.Errorf("writer: %v", err)
			return
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			t.Errorf("writer: %v", err)
			return
		}
		c.lsn = uint64(l)
		live[c.doc] = !c.del
		checks <- h.add(c)
		time.Sleep(time.Duration(20+rnd.IntN(30)) * time.Millisecond)
	}
}

// currentLSN is the server's WAL position now.
func currentLSN(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var s string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s))
	return s
}

// waitPassed waits until the index's watermark passes position.
func waitPassed(t *testing.T, ix *service.Index, position string, limit time.Duration) {
	t.Helper()
	a, err := cdc.ParseAfter(position)
	require.NoError(t, err)
	require.NoError(t, ix.Store.WaitAfter(t.Context(), a, limit), "serve did not reach %s", position)
}

// smallPoolURL caps a pool's connections: a WaitAfter in flight holds one
// more of its own (a listening connection leaves the pool).
func smallPoolURL(n int) string {
	u := pgtest.URL()
	if p, err := url.Parse(u); err == nil && p.Scheme != "" {
		q := p.Query()
		q.Set("pool_max_conns", strconv.Itoa(n))
		p.RawQuery = q.Encode()
		return p.String()
	}
	return u + " pool_max_conns=" + strconv.Itoa(n)
}

// TestReadYourWritesThroughKills is a property test of the watermark from
// a reader's side. A writer creates, updates and deletes a few dozen
// documents of a Postgres table, each version carrying a unique word,
// while `ragsync serve` streams them by logical replication and is
// SIGKILLed and restarted three times. After about every other commit, a
// reader (up to four at once; a commit finding all busy gets none) takes
// the change's position, pg_current_wal_lsn() read after COMMIT on the
// writer's connection (or for every fourth reader, the host's clock after
// COMMIT), and waits with sink.Store.WaitAfter. Whenever the wait returns
// nil the index must hold that change and everything committed before it:
// every document at least as new as its last change before the position,
// and a search for a just-written word finds its document. After each
// restart a reader also waits, by time and by position, for the last
// change committed while serve was down (longer than the idle slot's 1 s
// slack), the case where a time watermark taken from the server's clock
// alone runs ahead of the WAL the slot has read. A wait that
// ends in *sink.NotYetError (serve down) is no violation, but most checks
// must pass; and the same reads made without waiting must see the index
// behind, or the property could not fail.
func TestReadYourWritesThroughKills(t *testing.T) {
	t.Parallel() // own schema, slot, publication and application_name
	if testing.Short() {
		t.Skip("kill test: needs Postgres; skipped under -short")
	}
	const (
		docs      = 40
		inFlight  = 4 // checks at once, each holding a listening connection
		waitLimit = 15 * time.Second
		kills     = 3
	)
	ctx := t.Context()
	r := pgtest.Replication(t)
	tbl := r.Schema + ".articles"
	r.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, title text, body text)`, tbl))
	e := pgSourceEnv(t, r, r.Slot)
	p := e.startServe("serve-0")

	// The index exists once serve has migrated and registered it.
	var ix *service.Index
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		ix, err = service.Open(ctx, service.IndexConfig{URL: smallPoolURL(3), Schema: e.schema, Index: "articles",
			Embedder: embedder.Config{Provider: embedder.ProviderHashing, Dimensions: 256}.WithDefaults()}, sink.Read, nil, nil)
		if err == nil {
			break
		}
		require.False(t, p.exited(), "serve exited early")
		require.True(t, time.Now().Before(deadline), "serve did not create the index: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(ix.Close)
	// Streaming: the slot exists and the watermark follows the server.
	waitPassed(t, ix, currentLSN(t, r.Conn), time.Minute)
	start, err := pglogrepl.ParseLSN(currentLSN(t, r.Conn))
	require.NoError(t, err)

	h := &rywHistory{start: uint64(start)}
	rd := &rywReader{ix: ix, table: tbl, hist: h, wait: waitLimit}
	stop := make(chan struct{})
	stopWriting := sync.OnceFunc(func() { close(stop) })
	changes := make(chan int, 1)
	var writer, checks sync.WaitGroup
	// A failure below ends the test early: the writer and the readers
	// must be done before it is (and before serve and the slot go).
	t.Cleanup(func() { stopWriting(); writer.Wait(); checks.Wait() })
	writer.Add(1)
	go func() { defer writer.Done(); rywWriter(t, ctx, tbl, docs, h, stop, changes) }()

	var dispatched, skipped int
	checks.Add(1)
	go func() {
		defer checks.Done()
		sem := make(chan struct{}, inFlight)
		rnd := rand.New(rand.NewPCG(23, 23))
		for k := range changes {
			if rnd.IntN(2) == 0 {
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				skipped++ // every reader busy: the writer never waits for one
				continue
			}
			dispatched++
			byTime := dispatched%4 == 0
			checks.Add(1)
			go func() {
				defer checks.Done()
				defer func() { <-sem }()
				rd.check(t, ctx, k, byTime)
			}()
		}
	}()

	rnd := rand.New(rand.NewPCG(29, 29))
	var restartTimePassed atomic.Int64
	for i := range kills {
		// Kill while serve streams: after it caught up once, a random
		// while into the writing.
		time.Sleep(time.Duration(700+rnd.IntN(1300)) * time.Millisecond)
		kill(t, p)
		// Down for longer than the idle slot's 1 s slack, so the changes
		// committed meanwhile are older than a restarted slot's first
		// idle time watermark could claim.
		time.Sleep(time.Duration(1200+rnd.IntN(400)) * time.Millisecond)
		_, hs := h.snapshot()
		require.NotEmpty(t, hs)
		k := len(hs) - 1
		p = e.startServe(fmt.Sprintf("serve-%d", i+1))
		// A reader of the last change committed while serve was down
		// waits through the restart, by time and by position.
		for _, byTime := range []bool{true, false} {
			checks.Add(1)
			go func() {
				defer checks.Done()
				if rd.check(t, ctx, k, byTime) && byTime {
					restartTimePassed.Add(1)
				}
			}()
		}
		waitPassed(t, ix, currentLSN(t, r.Conn), time.Minute)
	}
	time.Sleep(time.Second)
	stopWriting()
	writer.Wait()
	checks.Wait()

	// The end: the last change, by position and by time, with a long
	// wait that must not end in NotYet.
	_, hs := h.snapshot()
	require.NotEmpty(t, hs)
	lastK := len(hs) - 1
	waitPassed(t, ix, pglogrepl.LSN(hs[lastK].lsn).String(), time.Minute)
	v, err := rd.verify(ctx, lastK)
	require.NoError(t, err)
	require.Empty(t, v, "the index at the end")
	waitPassed(t, ix, hs[lastK].at.UTC().Format(time.RFC3339Nano), time.Minute)
	stopServe(t, p)

	var creates, updates, deletes int
	seen, live := map[int]bool{}, map[int]bool{}
	for _, c := range hs {
		switch {
		case c.del:
			deletes++
		case live[c.doc]:
			updates++
		default:
			creates++
		}
		seen[c.doc], live[c.doc] = true, !c.del
	}
	passed, notYet := rd.passed.Load(), rd.notYet.Load()
	t.Logf("read-your-writes: %d changes (%d creates, %d updates, %d deletes) over %d documents, %d SIGKILLs; "+
		"%d checks and %d through restarts (%d skipped, readers busy): %d passed (%d by time), %d not yet, %d violations by position and %d by time; "+
		"%d stale when read without waiting; %d searches superseded by a later change",
		len(hs), creates, updates, deletes, len(seen), kills, dispatched, 2*kills, skipped, passed, rd.timePassed.Load(), notYet,
		rd.posViolations.Load(), rd.timeViolations.Load(), rd.staleUnwaited.Load(), rd.superseded.Load())
	require.Zero(t, rd.posViolations.Load(), "a wait for pg_current_wal_lsn() after COMMIT returned before the index held the change")
	require.Zero(t, rd.timeViolations.Load(), "a wait for the clock after COMMIT returned before the index held the change")
	require.Positive(t, deletes)
	require.GreaterOrEqual(t, passed, int64(20), "too few checks passed to say anything")
	require.GreaterOrEqual(t, float64(passed), 0.8*float64(passed+notYet), "most waits must pass: the watermark must move once serve is back")
	require.GreaterOrEqual(t, rd.timePassed.Load(), int64(2), "time-based waits must pass too")
	require.Positive(t, restartTimePassed.Load(), "a time-based wait through a restart must pass too")
	require.Positive(t, rd.staleUnwaited.Load(), "read without waiting, the index must sometimes lag: else these checks could not fail")
}
