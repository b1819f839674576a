package fallback

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maintain runs every reclaim_interval: retry or dead-letter requests left
// pending by failed searches or dead workers, re-drive unanswered dead
// letters, trim the request stream and refresh the gauges.
func (f *FrontDoor) maintain(ctx context.Context) error {
	t := time.NewTicker(f.cfg.ReclaimInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := f.reclaim(ctx, f.keys.requests(), f.cfg.Consumer+"-reclaim", f.handleRequest, true); err != nil && ctx.Err() == nil {
			f.logger.WarnContext(ctx, "reclaim pending requests", "error", err)
		}
		if err := f.reclaim(ctx, f.keys.dlq(), f.cfg.Consumer+"-dlq", f.handleDeadLetter, false); err != nil && ctx.Err() == nil {
			f.logger.WarnContext(ctx, "reclaim pending dead letters", "error", err)
		}
		if err := f.trimAndMeasure(context.WithoutCancel(ctx)); err != nil {
			f.logger.WarnContext(ctx, "trim streams", "error", err)
		}
	}
}

// reclaim takes over entries idle for min_idle with XAUTOCLAIM, which counts
// a delivery each time. Requests past max_deliveries are dead-lettered;
// others are handled again. Dead letters are retried without limit (their
// answer needs only Redis, and usually the stale cache).
//
// One call is bounded: it claims at most max_in_flight entries
// and handles them concurrently, so it lasts about one search_timeout
// rather than one per entry; the rest waits for the next tick. It is
// cancellable: when ctx ends it claims no more, and the searches in flight
// end with it, leaving their entries pending for the next front door
// instead of holding up shutdown.
func (f *FrontDoor) reclaim(ctx context.Context, stream, consumer string, h handler, limit bool) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, f.cfg.MaxInFlight)
	claimed := 0
	start := "0-0"
	for claimed < f.cfg.MaxInFlight && ctx.Err() == nil {
		msgs, next, err := f.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: f.cfg.Group, Consumer: consumer,
			MinIdle: f.cfg.MinIdle, Start: start, Count: int64(min(f.cfg.BatchSize, f.cfg.MaxInFlight-claimed)),
		}).Result()
		if err != nil {
			if strings.HasPrefix(err.Error(), "NOGROUP") || ctx.Err() != nil {
				return nil
			}
			return err
		}
		claimed += len(msgs)
		if len(msgs) > 0 {
			counts, err := f.deliveryCounts(ctx, stream, consumer, msgs)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				f.metrics.reclaimed.Inc()
				n := counts[m.ID]
				if limit && n > int64(f.cfg.MaxDeliveries) {
					reason, _ := f.rdb.Get(ctx, f.keys.failure(m.ID)).Result()
					if err := f.deadLetter(ctx, m.ID, n-1, reason); err != nil {
						return err
					}
					continue
				}
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					h(ctx, m, n)
				})
			}
		}
		if next == "0-0" || next == "" {
			return nil
		}
		start = next
	}
	return nil
}

// deliveryCounts reads the delivery counter of freshly claimed entries from
// the pending entries list (XAUTOCLAIM does not return it).
func (f *FrontDoor) deliveryCounts(ctx context.Context, stream, consumer string, msgs []redis.XMessage) (map[string]int64, error) {
	pend, err := f.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: stream, Group: f.cfg.Group, Start: msgs[0].ID, End: msgs[len(msgs)-1].ID,
		Count: int64(len(msgs)) * 4, Consumer: consumer,
	}).Result()
	if err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(pend))
	for _, p := range pend {
		counts[p.ID] = p.RetryCount
	}
	return counts, nil
}

// trimAndMeasure removes request entries every consumer of the group is done
// with (XTRIM MINID ~ below both the oldest pending entry and the last
// delivered one), and refreshes the pending and DLQ gauges. Dead letters are
// trimmed by MAXLEN ~ when added.
func (f *FrontDoor) trimAndMeasure(ctx context.Context) error {
	stream := f.keys.requests()
	groups, err := f.rdb.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return err
	}
	var lastDelivered string
	for _, g := range groups {
		if g.Name == f.cfg.Group {
			lastDelivered = g.LastDeliveredID
		}
	}
	sum, err := f.rdb.XPending(ctx, stream, f.cfg.Group).Result()
	if err != nil {
		return err
	}
	f.metrics.pending.Set(float64(sum.Count))
	minID := lastDelivered
	if sum.Count > 0 && lessID(sum.Lower, minID) {
		minID = sum.Lower
	}
	// Only trim when this is the only group reading the stream: another
	// group's progress is not ours to judge.
	if len(groups) == 1 && minID != "" && minID != "0-0" {
		if err := f.rdb.XTrimMinIDApprox(ctx, stream, minID, 0).Err(); err != nil {
			return err
		}
	}
	n, err := f.rdb.XLen(ctx, f.keys.dlq()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	f.metrics.dlqEntries.Set(float64(n))
	return nil
}

// lessID compares stream ids "ms-seq".
func lessID(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) {
		return len(am) < len(bm)
	}
	if am != bm {
		return am < bm
	}
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	return as < bs
}
