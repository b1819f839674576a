package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ragsync/ragsync/cdc"
	"github.com/ragsync/ragsync/cdc/kafka"
	"github.com/ragsync/ragsync/cdc/registry"
)

// inspectLine is one line of inspect's output: the change, or why there is
// none, with the registry schema a framed record was written with.
type inspectLine struct {
	*cdc.Change
	Line   int            `json:"line,omitempty"`
	Coord  *cdc.Coord     `json:"at,omitempty"`
	Skip   string         `json:"skip,omitempty"`
	Error  string         `json:"error,omitempty"`
	Schema *inspectSchema `json:"schema,omitempty"`
}

// inspectSchema names the registered schema of a framed value.
type inspectSchema struct {
	ID      int    `json:"id"`
	Type    string `json:"type,omitempty"`
	Subject string `json:"subject,omitempty"`
	Version int    `json:"version,omitempty"`
}

// topicRecords reads each partition of topics from its start to the end
// offset it had when the read began, at most max records in all (0: no
// limit), without a consumer group: it commits nothing and no member of
// serve's group notices it.
func topicRecords(ctx context.Context, brokers, topics []string, max int, each func(cdc.Record) error) error {
	adm, err := kafka.Dial(brokers)
	if err != nil {
		return fmt.Errorf("inspect: connect to %v: %w", brokers, err)
	}
	defer adm.Close()
	ac := kadm.NewClient(adm)
	starts, err := ac.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("inspect: list offsets of %v at %v: %w (is --brokers right?)", topics, brokers, err)
	}
	ends, err := ac.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("inspect: list offsets of %v at %v: %w", topics, brokers, err)
	}
	from := map[string]map[int32]kgo.Offset{}
	left := map[string]map[int32]int64{} // the end offset each partition is read to
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		st, ok := starts.Lookup(o.Topic, o.Partition)
		if !ok || st.Err != nil || st.Offset >= o.Offset {
			return
		}
		if from[o.Topic] == nil {
			from[o.Topic], left[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(st.Offset)
		left[o.Topic][o.Partition] = o.Offset
	})
	if err := ends.Error(); err != nil {
		return fmt.Errorf("inspect: read the offsets of %s at %v: %w (is the topic name right?)", strings.Join(topics, ", "), brokers, err)
	}
	if len(from) == 0 {
		return nil // every partition is empty
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(from))
	if err != nil {
		return err
	}
	defer cl.Close()
	n := 0
	for len(left) > 0 {
		// The last offsets before the end may hold no record a consumer
		// sees (a transaction's commit marker, as Debezium's exactly-once
		// delivery writes): a partition with nothing more to give for
		// inspectIdle is at its end.
		pollCtx, cancel := context.WithTimeout(ctx, inspectIdle)
		fs := cl.PollFetches(pollCtx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.NumRecords() == 0 && pollCtx.Err() != nil {
			return nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = errors.Join(ferr, fmt.Errorf("fetch %s/%d: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Topic][r.Partition]
			if stop != nil || !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(left[r.Topic], r.Partition)
				if len(left[r.Topic]) == 0 {
					delete(left, r.Topic)
				}
			}
			m := cdc.Record{Raw: cdc.Raw{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}}
			for _, h := range r.Headers {
				m.Headers = append(m.Headers, cdc.Header{Key: h.Key, Value: h.Value})
			}
			if stop = each(m); stop == nil {
				n++
				if max > 0 && n >= max {
					stop = io.EOF
				}
			}
		})
		if errors.Is(stop, io.EOF) {
			return nil
		}
		if stop != nil {
			return stop
		}
	}
	return nil
}

// inspectIdle is how long inspect --topic waits for more records before
// taking the partitions it still reads as ended.
var inspectIdle = 5 * time.Second

// describeFramed is the registry's schema of a framed value, or nil for a
// value that is not framed or whose schema the registry cannot describe.
func describeFramed(ctx context.Context, reg *registry.Registry, value []byte) *inspectSchema {
	if reg == nil || !cdc.IsFramed(value) {
		return nil
	}
	id := int(binary.BigEndian.Uint32(value[1:5]))
	s, err := reg.Describe(ctx, id)
	if err != nil {
		return &inspectSchema{ID: id}
	}
	return &inspectSchema{ID: id, Type: s.Type, Subject: s.Subject, Version: s.Version}
}
