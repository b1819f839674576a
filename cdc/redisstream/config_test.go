package redisstream_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ragsync/ragsync/cdc/redisstream"
)

func TestConfigValidate(t *testing.T) {
	ok := redisstream.Config{URL: "redis://127.0.0.1:6379/0", Streams: []string{"dbserver1.public.articles"}}
	for _, tc := range []struct {
		name    string
		edit    func(c *redisstream.Config)
		wantErr []string
	}{
		{"complete", func(*redisstream.Config) {}, nil},
		{"no url", func(c *redisstream.Config) { c.URL = "" }, []string{"source.redis_streams.url: set"}},
		{"no streams", func(c *redisstream.Config) { c.Streams = nil }, []string{"source.redis_streams.streams: list"}},
		{"empty stream", func(c *redisstream.Config) { c.Streams = []string{" "} }, []string{"streams[0]: empty"}},
		{"twice", func(c *redisstream.Config) { c.Streams = []string{"a", "a"} }, []string{"streams[1]: \"a\" is listed twice"}},
		{"a dead-letter stream", func(c *redisstream.Config) { c.Streams = []string{"a" + redisstream.DLQSuffix} }, []string{"is a dead-letter stream"}},
		{"start", func(c *redisstream.Config) { c.Start = "beginning" }, []string{`source.redis_streams.start: "beginning" is not earliest or latest`}},
		{"negative", func(c *redisstream.Config) { c.MaxPollRecords, c.Block = -1, -1 }, []string{"max_poll_records", "block and claim_idle"}},
		{"all at once", func(c *redisstream.Config) { c.URL, c.Streams = "", nil }, []string{"url", "streams"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.edit(&c)
			err := c.Validate()
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestOffsetOrdersEntryIDs(t *testing.T) {
	for _, tc := range []struct {
		id     string
		wantOK bool
	}{
		{"0-0", true}, {"0-1", true}, {"1-0", true}, {"1700000000000-0", true}, {"1700000000000-1", true},
		{"1700000000000-1048575", true}, {"1700000000001-0", true}, {"4398046511103-0", true},
		{"nope", false}, {"1-x", false}, {"-1", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			off, ok := redisstream.Offset(tc.id)
			require.Equal(t, tc.wantOK, ok)
			if ok {
				require.Equal(t, tc.id, redisstream.EntryID(off), "exact for ids Redis generates")
				require.GreaterOrEqual(t, off, int64(0))
			}
		})
	}
	ordered := []string{"0-0", "0-1", "1-0", "1700000000000-0", "1700000000000-1", "1700000000000-1048575", "1700000000000-1048576", "1700000000001-0", "99999999999999999-5"}
	prev := int64(-1)
	for _, id := range ordered {
		off, ok := redisstream.Offset(id)
		require.True(t, ok)
		require.GreaterOrEqual(t, off, prev, "%s", id)
		prev = off
	}
}
