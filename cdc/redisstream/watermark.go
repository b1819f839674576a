package redisstream

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/cdc"
)

// Marks returns the group's watermark on every stream that has the group,
// read from Redis so that it holds for every consumer of the group, not
// only this one: every entry before the group's oldest pending entry (or,
// with none pending, up to its last delivered entry) is acknowledged, and
// so applied. The time watermark is the time Redis added the entry just
// before the oldest pending one (an entry id's milliseconds), or, for a
// stream the group has read to its end, the time just before it was
// asked. Commit times are not read (that would decode the entry): the
// marks carry none.
func (s *Source) Marks(ctx context.Context) ([]cdc.Mark, error) {
	var out []cdc.Mark
	for _, name := range s.cfg.Streams {
		m, ok, err := s.streamMark(ctx, name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Source) streamMark(ctx context.Context, name string) (cdc.Mark, bool, error) {
	asked := time.Now()
	groups, err := s.rdb.XInfoGroups(ctx, name).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return cdc.Mark{}, false, nil
		}
		return cdc.Mark{}, false, fmt.Errorf("read the groups of stream %s (XINFO GROUPS): %w", name, err)
	}
	var g *redis.XInfoGroup
	for i := range groups {
		if groups[i].Name == s.cfg.Group {
			g = &groups[i]
		}
	}
	if g == nil {
		return cdc.Mark{}, false, nil
	}
	ms, seq, ok := parseID(g.LastDeliveredID)
	if !ok || (ms == 0 && seq == 0) {
		return cdc.Mark{}, false, nil // nothing delivered yet
	}
	source := "redis:" + s.cfg.Group
	if g.Pending > 0 {
		p, err := s.rdb.XPending(ctx, name, s.cfg.Group).Result()
		if err != nil {
			return cdc.Mark{}, false, fmt.Errorf("read the pending entries of stream %s (XPENDING): %w", name, err)
		}
		if p.Count > 0 {
			pms, pseq, ok := parseID(p.Lower)
			if !ok {
				return cdc.Mark{}, false, nil
			}
			// The entry just before the oldest pending one.
			ms, seq = pms, pseq-1
			if pseq == 0 {
				if pms == 0 {
					return cdc.Mark{}, false, nil
				}
				ms, seq = pms-1, math.MaxUint64
			}
			through := time.UnixMilli(int64(pms)).Add(-time.Millisecond)
			return cdc.EntryMark(source, name, ms, seq, time.Time{}, through, false), true, nil
		}
	}
	caught := s.lagKnown && g.Lag == 0
	through := time.UnixMilli(int64(ms))
	if caught {
		through = asked
	} else {
		through = through.Add(-time.Millisecond)
	}
	return cdc.EntryMark(source, name, ms, seq, time.Time{}, through, caught), true, nil
}

// parseID reads a stream entry id "ms-seq".
func parseID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}
