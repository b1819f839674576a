package redisstream_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/redisstream"
)

// TestEntriesInOrderAcknowledgedOnlyByAck: entries come out in stream
// order, decoded, with their coordinates and original bytes; they stay
// pending in the group until the batch's Ack, which acknowledges exactly
// its own entries.
func TestEntriesInOrderAcknowledgedOnlyByAck(t *testing.T) {
	b := setup(t)
	want := b.addArticles(t, 7)
	s := b.source(t, redisstream.Config{MaxPollRecords: 3})
	bs := fetch(t, s, 7)
	require.Len(t, bs, 3, "batches of at most max_poll_records")
	recs := records(bs)
	require.Equal(t, want, ids(recs), "stream order")
	for i, r := range recs {
		require.NoError(t, r.Err)
		require.NotNil(t, r.Change)
		require.Equal(t, b.stream, r.Topic)
		require.Equal(t, "public.articles", r.Change.Table)
		k, v := article(i, int64(100+i), r.Change.After["title"].(string))
		require.Equal(t, k, string(r.Key), "the key as Debezium wrote it")
		require.Equal(t, v, string(r.Value), "the value as Debezium wrote it")
		if i > 0 {
			require.Greater(t, r.Offset, recs[i-1].Offset, "offsets are monotone")
		}
	}
	for _, bt := range bs {
		require.Equal(t, b.stream, bt.Lane, "one lane per stream")
	}
	require.EqualValues(t, 7, b.pending(t, "ragsync"), "nothing is acknowledged before Ack")
	require.NoError(t, bs[1].Ack(t.Context()))
	require.EqualValues(t, 4, b.pending(t, "ragsync"), "Ack acknowledges its batch only")
	p, err := b.rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: b.stream, Group: "ragsync", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	var left []string
	for _, e := range p {
		left = append(left, e.ID)
	}
	require.Equal(t, append(append([]string{}, want[:3]...), want[6]), left)
	ackAll(t, []cdc.Batch{bs[0], bs[2]})
	require.Zero(t, b.pending(t, "ragsync"))
	quiet(t, s, 2)
}

// TestUnacknowledgedEntriesAreReadAgainAfterACrash: a source closed without
// acknowledging (a crash) leaves its entries pending; a new source with the
// same consumer name reads exactly those again first, then new entries,
// and never the ones acknowledged before.
func TestUnacknowledgedEntriesAreReadAgainAfterACrash(t *testing.T) {
	b := setup(t)
	want := b.addArticles(t, 6)
	s1 := b.source(t, redisstream.Config{MaxPollRecords: 3, ClaimIdle: time.Hour})
	bs := fetch(t, s1, 6)
	require.NoError(t, bs[0].Ack(t.Context()))
	s1.Close() // bs[1] is never acknowledged

	later := b.addArticles(t, 1)
	s2 := b.source(t, redisstream.Config{MaxPollRecords: 3, ClaimIdle: time.Hour})
	again := fetch(t, s2, 4)
	require.Equal(t, append(append([]string{}, want[3:]...), later...), ids(records(again)),
		"the unacknowledged entries first, then the new one")
	for _, r := range records(again) {
		require.NotNil(t, r.Change, "a redelivered entry is decoded like the first time")
	}
	ackAll(t, again)
	require.Zero(t, b.pending(t, "ragsync"))
	quiet(t, s2, 2)
}

// TestDeadConsumersEntriesAreClaimed: entries pending on a consumer that
// died are taken over by another once idle for claim_idle, and not
// before.
func TestDeadConsumersEntriesAreClaimed(t *testing.T) {
	b := setup(t)
	want := b.addArticles(t, 5)
	dead := b.source(t, redisstream.Config{Consumer: "dead"})
	fetch(t, dead, 5)
	dead.Close()

	patient := b.source(t, redisstream.Config{Consumer: "patient", ClaimIdle: time.Hour})
	quiet(t, patient, 3)
	patient.Close()

	s := b.source(t, redisstream.Config{Consumer: "alive", ClaimIdle: 200 * time.Millisecond})
	bs := fetch(t, s, 5)
	require.Equal(t, want, ids(records(bs)))
	owners, err := b.rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: b.stream, Group: "ragsync", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	for _, o := range owners {
		require.Equal(t, "alive", o.Consumer)
	}
	ackAll(t, bs)
	require.Zero(t, b.pending(t, "ragsync"))
}

// TestSlowOwnEntriesAreNotHandedOutTwice: a claim pass that finds this
// consumer's own entries idle (handed out, not yet applied) does not hand
// them out again.
func TestSlowOwnEntriesAreNotHandedOutTwice(t *testing.T) {
	b := setup(t)
	b.addArticles(t, 3)
	s := b.source(t, redisstream.Config{ClaimIdle: 20 * time.Millisecond})
	bs := fetch(t, s, 3)
	// Several claim passes run while the batch is out (one every 10ms,
	// each Fetch waits up to 50ms); none may hand the entries out again.
	quiet(t, s, 5)
	ackAll(t, bs)
	require.Zero(t, b.pending(t, "ragsync"))
}

// TestEntryShapes: both of Debezium Server's formats are read, null keys
// and values are its literal, and a tombstone is skipped; an entry of
// neither shape is refused with all its fields kept.
func TestEntryShapes(t *testing.T) {
	b := setup(t)
	k, v := article(1, 100, "Compact")
	b.addCompact(t, k, v)
	k, v = article(2, 200, "Extended")
	b.addExtended(t, k, v, "TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "__DEBEZIUM.CONTEXT.TASKID", "0")
	b.addCompact(t, k, "default")  // compact tombstone
	b.addExtended(t, k, "default") // extended tombstone
	b.addCompact(t, "default", v)  // null key
	b.addExtended(t, k, "nil")     // a tombstone under null.value=nil
	b.addCompact(t, "key", v)      // compact, though its key is "key"
	id := b.addExtended(t, k, v)   // deleted before it is read: never seen
	require.NoError(t, b.rdb.XDel(t.Context(), b.stream, id).Err())
	bad, err := b.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: b.stream, Values: []any{"before", "x", "after", "y"}}).Result()
	require.NoError(t, err)

	s := b.source(t, redisstream.Config{NullValue: "nil"})
	recs := records(fetch(t, s, 8))

	require.Equal(t, "Compact", recs[0].Change.After["title"])
	require.Equal(t, "Extended", recs[1].Change.After["title"])
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", recs[1].Change.TraceParent,
		"the upper-cased header still carries the trace")
	require.Equal(t, []cdc.Header{{Key: "TRACEPARENT", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
		{Key: "__DEBEZIUM.CONTEXT.TASKID", Value: []byte("0")}}, recs[1].Headers, "headers by name")

	// null.value is "nil" here, so "default" is a value that is not JSON.
	var de *cdc.DecodeError
	require.ErrorAs(t, recs[2].Err, &de)
	require.ErrorAs(t, recs[3].Err, &de)
	require.Equal(t, []byte("default"), recs[3].Value)

	require.Nil(t, recs[4].Key, "the null key literal is no key")
	require.Error(t, recs[4].Err, "and without tables[].id there is no document key")

	var skip *cdc.SkipError
	require.ErrorAs(t, recs[5].Err, &skip)
	require.Equal(t, cdc.SkipTombstone, skip.Reason)
	require.Nil(t, recs[5].Value)

	require.Equal(t, []byte("key"), recs[6].Key, "one field is compact whatever its name")
	require.Equal(t, []byte(v), recs[6].Value)

	require.Equal(t, bad, redisstream.EntryID(recs[7].Offset))
	require.ErrorAs(t, recs[7].Err, &de)
	require.Contains(t, de.Reason, "not in a Debezium Server Redis sink format")
	require.Equal(t, []cdc.Header{{Key: "after", Value: []byte("y")}, {Key: "before", Value: []byte("x")}}, recs[7].Headers,
		"every field is kept for the dead letter")
}

// TestDefaultNullValueIsATombstone: with the default null.value, Debezium
// Server's "default" is a tombstone, skipped.
func TestDefaultNullValueIsATombstone(t *testing.T) {
	b := setup(t)
	k, _ := article(1, 100, "x")
	b.addCompact(t, k, "default")
	b.addExtended(t, k, "default")
	s := b.source(t, redisstream.Config{})
	for _, r := range records(fetch(t, s, 2)) {
		var skip *cdc.SkipError
		require.ErrorAs(t, r.Err, &skip)
		require.Equal(t, cdc.SkipTombstone, skip.Reason)
	}
}

// TestDeletedPendingEntryIsSkipped: an entry deleted (XDEL, or trimmed)
// while pending comes back without data; it is skipped and acknowledged,
// not handed over as a change.
func TestDeletedPendingEntryIsSkipped(t *testing.T) {
	b := setup(t)
	want := b.addArticles(t, 2)
	s1 := b.source(t, redisstream.Config{ClaimIdle: time.Hour})
	fetch(t, s1, 2)
	s1.Close()
	require.NoError(t, b.rdb.XDel(t.Context(), b.stream, want[0]).Err())

	s2 := b.source(t, redisstream.Config{ClaimIdle: time.Hour})
	bs := fetch(t, s2, 2)
	recs := records(bs)
	require.Equal(t, want, ids(recs))
	require.ErrorIs(t, recs[0].Err, cdc.ErrSkip)
	require.Nil(t, recs[0].Change)
	require.NotNil(t, recs[1].Change)
	ackAll(t, bs)
	require.Zero(t, b.pending(t, "ragsync"))
}

// TestStopAtEnd: serve --once hands out what the stream held at start,
// including this consumer's pending entries and those of a dead one, and
// then io.EOF.
func TestStopAtEnd(t *testing.T) {
	b := setup(t)
	want := b.addArticles(t, 6)
	crashed := b.source(t, redisstream.Config{MaxPollRecords: 2})
	fetch(t, crashed, 2) // left pending on c1
	crashed.Close()
	dead := b.source(t, redisstream.Config{MaxPollRecords: 2, Consumer: "dead"})
	fetch(t, dead, 2) // left pending on a dead consumer
	dead.Close()

	s := b.source(t, redisstream.Config{StopAtEnd: true, ClaimIdle: time.Millisecond})
	var got []cdc.Record
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		bt, err := s.Fetch(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got = append(got, bt.Records...)
		if bt.Ack != nil {
			require.NoError(t, bt.Ack(ctx))
		}
	}
	require.ElementsMatch(t, want, ids(got))
	require.Zero(t, b.pending(t, "ragsync"))
	_, err := s.Fetch(ctx)
	require.ErrorIs(t, err, io.EOF, "and stays at the end")
}

// TestStopAtEndOnMissingOrLatest: a stream that does not exist, or a
// group that starts at the latest entry, has nothing to hand out.
func TestStopAtEndOnMissingOrLatest(t *testing.T) {
	b := setup(t)
	missing := b.stream + ".none"
	s := b.source(t, redisstream.Config{StopAtEnd: true, Streams: []string{missing}})
	_, err := s.Fetch(t.Context())
	require.ErrorIs(t, err, io.EOF)
	n, err := b.rdb.Exists(t.Context(), missing).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the source never creates a stream")

	b.addArticles(t, 3)
	s = b.source(t, redisstream.Config{StopAtEnd: true, Start: redisstream.StartLatest})
	bt, err := s.Fetch(t.Context())
	if err == nil {
		require.Empty(t, bt.Records)
		_, err = s.Fetch(t.Context())
	}
	require.ErrorIs(t, err, io.EOF)
}

// TestMissingStreamIsWaitedFor: a stream Debezium Server has not written
// yet is not created and not an error; its entries are read once it
// exists, from its first (start: earliest).
func TestMissingStreamIsWaitedFor(t *testing.T) {
	b := setup(t)
	s := b.source(t, redisstream.Config{})
	quiet(t, s, 2)
	n, err := b.rdb.Exists(t.Context(), b.stream).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the source never creates the stream")
	want := b.addArticles(t, 2)
	require.Equal(t, want, ids(records(fetch(t, s, 2))))
}

// TestStartLatestSkipsWhatWasThere: start: latest creates the group at the
// end of the stream, so only entries added after are read.
func TestStartLatestSkipsWhatWasThere(t *testing.T) {
	b := setup(t)
	b.addArticles(t, 3)
	s := b.source(t, redisstream.Config{Start: redisstream.StartLatest})
	quiet(t, s, 1)
	k, v := article(9, 900, "after")
	id := b.addCompact(t, k, v)
	require.Equal(t, []string{id}, ids(records(fetch(t, s, 1))))
}

// TestManyStreamsTakeTurns: each stream is its own lane, and a busy
// stream does not starve another.
func TestManyStreamsTakeTurns(t *testing.T) {
	b := setup(t)
	other := &bundle{rdb: b.rdb, stream: b.stream + ".other"}
	b.addArticles(t, 10)
	other.addArticles(t, 2)
	s := b.source(t, redisstream.Config{Streams: []string{b.stream, other.stream}, MaxPollRecords: 2})
	bs := fetch(t, s, 12)
	lanes := map[string]int{}
	for i, bt := range bs {
		lanes[bt.Lane] += len(bt.Records)
		if i < 2 {
			require.Equal(t, []string{b.stream, other.stream}[i], bt.Lane, "the streams take turns")
		}
	}
	require.Equal(t, map[string]int{b.stream: 10, other.stream: 2}, lanes)
}

// TestNewSourceErrors: what cannot work is refused at start with the
// setting to fix.
func TestNewSourceErrors(t *testing.T) {
	before := goleak.IgnoreCurrent()
	_, err := redisstream.NewSource(t.Context(), redisstream.Config{URL: "http://x", Streams: []string{"s"}})
	require.ErrorContains(t, err, "source.redis_streams.url: not a Redis URL")
	_, err = redisstream.NewSource(t.Context(), redisstream.Config{URL: "redis://:secret@127.0.0.1:1/0", Streams: []string{"s"}})
	require.ErrorContains(t, err, "source.redis_streams.url")
	require.NotContains(t, err.Error(), "secret")
	// The client it made is closed; go-redis's dial prober notices within
	// a second.
	require.Eventually(t, func() bool { return goleak.Find(before) == nil }, 30*time.Second, 50*time.Millisecond)
}

// TestIdleConsumersWithNothingPendingAreForgotten: a start deletes the
// group's consumers that left nothing pending and were idle for
// claim_idle (each restart under a host-and-pid name adds one), and
// keeps any that still has entries pending.
func TestIdleConsumersWithNothingPendingAreForgotten(t *testing.T) {
	b := setup(t)
	b.addArticles(t, 1)
	busy := b.source(t, redisstream.Config{Consumer: "busy"})
	fetch(t, busy, 1)
	busy.Close()
	require.NoError(t, b.rdb.XGroupCreateConsumer(t.Context(), b.stream, "ragsync", "old").Err())
	require.Eventually(t, func() bool {
		cs, err := b.rdb.XInfoConsumers(t.Context(), b.stream, "ragsync").Result()
		require.NoError(t, err)
		for _, c := range cs {
			if c.Name == "old" {
				return c.Idle >= 20*time.Millisecond
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond)

	b.source(t, redisstream.Config{Consumer: "new", ClaimIdle: 20 * time.Millisecond})
	cs, err := b.rdb.XInfoConsumers(t.Context(), b.stream, "ragsync").Result()
	require.NoError(t, err)
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	require.Equal(t, []string{"busy"}, names, "old is gone; busy keeps its pending entry")
}
