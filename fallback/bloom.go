package fallback

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Bloom filter kinds.
const (
	KindTenant = "tenant"
	KindDoc    = "doc"
)

// BloomConfig sizes the Bloom filters. With the defaults (16 Mi bits = 2 MiB
// per kind, 7 hashes) the false-positive rate stays under 1% up to about
// 1.7 million entries.
type BloomConfig struct {
	// Bits is the bitmap size per kind. Defaults to 16777216.
	Bits uint64 `yaml:"bits"`
	// Hashes is the number of bit positions per value. Defaults to 7.
	Hashes int `yaml:"hashes"`
}

// WithDefaults returns c with zero fields set to their defaults.
func (c BloomConfig) WithDefaults() BloomConfig {
	if c.Bits == 0 {
		c.Bits = 1 << 24
	}
	if c.Hashes == 0 {
		c.Hashes = 7
	}
	return c
}

func (c BloomConfig) validate() error {
	var errs []error
	// Redis strings top out at 512 MiB = 2^32 bits.
	if c.Bits < 64 || c.Bits > 1<<32 {
		errs = append(errs, fmt.Errorf("frontdoor.bloom.bits: must be between 64 and 4294967296, got %d", c.Bits))
	}
	if c.Hashes < 1 || c.Hashes > 32 {
		errs = append(errs, fmt.Errorf("frontdoor.bloom.hashes: must be between 1 and 32, got %d", c.Hashes))
	}
	return errors.Join(errs...)
}

// Bloom is a Bloom filter per kind (tenants, document ids) whose bitmap lives
// in Redis, so every front door process and the sink share it. Bit positions
// use double hashing over SHA-256 (h1 = first 8 bytes, h2 = next 8 bytes | 1,
// position i = (h1 + i·h2) mod Bits): no dependency, well spread, and easy to
// reproduce in any language that wants to check the filter itself.
//
// A kind's filter is consulted only after Rebuild has built it once: before
// that, Add is a no-op and every value "may exist", because a filter that
// had only seen documents arriving since start-up would reject real tenants.
// Safe for concurrent use.
type Bloom struct {
	rdb    *redis.Client
	prefix string
	docs   keys // Rebuild also rebuilds the document map of Changes
	cfg    BloomConfig
}

// NewBloom returns the Bloom filters of one index under prefix.
func NewBloom(rdb *redis.Client, prefix, index string, cfg BloomConfig) *Bloom {
	return &Bloom{rdb: rdb, prefix: prefix + ":bloom:" + index + ":", docs: keys{prefix: prefix, index: index}, cfg: cfg.WithDefaults()}
}

func (b *Bloom) key(kind string) string      { return b.prefix + kind }
func (b *Bloom) buildKey(kind string) string { return b.prefix + kind + ":building" }

func (b *Bloom) offsets(value string) []uint64 {
	h := sha256.Sum256([]byte(value))
	h1 := binary.BigEndian.Uint64(h[0:8])
	h2 := binary.BigEndian.Uint64(h[8:16]) | 1
	out := make([]uint64, b.cfg.Hashes)
	for i := range out {
		out[i] = (h1 + uint64(i)*h2) % b.cfg.Bits
	}
	return out
}

func (b *Bloom) bitfieldArgs(op string, value string) []any {
	offs := b.offsets(value)
	args := make([]any, 0, 4*len(offs))
	for _, o := range offs {
		if op == "SET" {
			args = append(args, "SET", "u1", o, 1)
		} else {
			// BitFieldRO adds the GET itself: pairs of type, offset.
			args = append(args, "u1", o)
		}
	}
	return args
}

// addScript sets the bits in the live filter (only if it was built) and in a
// rebuild in progress (only if one runs), so a document arriving during a
// rebuild is not lost when the new bitmap replaces the old one.
var addScript = redis.NewScript(`
local n = 0
for i = 1, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local args = {'BITFIELD', KEYS[i]}
    for j = 1, #ARGV do args[#args+1] = 'SET'; args[#args+1] = 'u1'; args[#args+1] = ARGV[j]; args[#args+1] = 1 end
    redis.call(unpack(args))
    n = n + 1
  end
end
return n
`)

func checkKind(kind string) error {
	if kind != KindTenant && kind != KindDoc {
		return fmt.Errorf("bloom kind %q: want %q or %q", kind, KindTenant, KindDoc)
	}
	return nil
}

// Add records value (a tenant or a document id) as known. The sink calls it
// as documents arrive. It is a no-op until the kind's filter was built by
// Rebuild.
func (b *Bloom) Add(ctx context.Context, kind, value string) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	offs := b.offsets(value)
	argv := make([]any, len(offs))
	for i, o := range offs {
		argv[i] = o
	}
	if err := addScript.Run(ctx, b.rdb, []string{b.key(kind), b.buildKey(kind)}, argv...).Err(); err != nil {
		return fmt.Errorf("bloom add %s: %w", kind, err)
	}
	return nil
}

// bloomCheck is a queued membership test, answered after the pipeline runs.
type bloomCheck struct {
	exists *redis.IntCmd
	bits   *redis.IntSliceCmd
}

func (b *Bloom) queueCheck(ctx context.Context, pipe redis.Pipeliner, kind, value string) bloomCheck {
	return bloomCheck{
		exists: pipe.Exists(ctx, b.key(kind)),
		bits:   pipe.BitFieldRO(ctx, b.key(kind), b.bitfieldArgs("GET", value)...),
	}
}

// mayContain is false only when the filter was built and a bit is clear.
func (c bloomCheck) mayContain() (bool, error) {
	if err := c.exists.Err(); err != nil {
		return true, err
	}
	if c.exists.Val() == 0 {
		return true, nil
	}
	bits, err := c.bits.Result()
	if err != nil {
		return true, err
	}
	for _, v := range bits {
		if v == 0 {
			return false, nil
		}
	}
	return true, nil
}

// MayContain reports whether value may be known. It is true when the filter
// has not been built yet. False is certain: the value was never added.
func (b *Bloom) MayContain(ctx context.Context, kind, value string) (bool, error) {
	if err := checkKind(kind); err != nil {
		return true, err
	}
	pipe := b.rdb.Pipeline()
	c := b.queueCheck(ctx, pipe, kind, value)
	if _, err := pipe.Exec(ctx); err != nil {
		return true, fmt.Errorf("bloom check %s: %w", kind, err)
	}
	return c.mayContain()
}

// Rebuild replaces both filters, and the document map of Changes, with the
// (tenant, document id) pairs scan passes to add, typically every live
// document of the index streamed from the sink. The new bitmaps and map are
// built beside the live ones and swapped in with RENAME, so queries keep
// using the old ones meanwhile.
//
// Nothing written during the rebuild is lost: the building keys exist before
// scan starts, and Changes writes every commit to them too, so a document
// committed after scan's snapshot is in them by the sink's own write, and
// one committed before is in the snapshot (collecting first and
// allocating after once lost what came in between). The scan's map entries never
// overwrite those writes (HSETNX), since they may be older. Empty tenants
// are skipped in the tenant filter. If scan fails, the live filters stay as
// they were. It returns the number of pairs read.
func (b *Bloom) Rebuild(ctx context.Context, scan func(add func(tenant, docID string) error) error) (int, error) {
	kinds := []string{KindTenant, KindDoc}
	// Allocate the building keys first so concurrent writes see them.
	pipe := b.rdb.Pipeline()
	for _, k := range kinds {
		pipe.Del(ctx, b.buildKey(k))
		pipe.SetBit(ctx, b.buildKey(k), int64(b.cfg.Bits-1), 0)
	}
	pipe.Del(ctx, b.docs.docsBuilding())
	pipe.HSet(ctx, b.docs.docsBuilding(), builtField, "1")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("bloom rebuild: allocate: %w", err)
	}
	discard := func() {
		_ = b.rdb.Del(context.WithoutCancel(ctx), b.buildKey(KindTenant), b.buildKey(KindDoc), b.docs.docsBuilding()).Err()
	}
	n := 0
	pipe = b.rdb.Pipeline()
	flush := func() error {
		if pipe.Len() == 0 {
			return nil
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	err := scan(func(tenant, docID string) error {
		n++
		if tenant != "" {
			pipe.BitField(ctx, b.buildKey(KindTenant), b.bitfieldArgs("SET", tenant)...)
		}
		if docID != "" {
			pipe.BitField(ctx, b.buildKey(KindDoc), b.bitfieldArgs("SET", docID)...)
			pipe.HSetNX(ctx, b.docs.docsBuilding(), docID, tenant)
		}
		if pipe.Len() >= 1000 {
			if err := flush(); err != nil {
				return fmt.Errorf("bloom rebuild after %d documents: %w", n, err)
			}
		}
		return nil
	})
	if err == nil {
		if err = flush(); err != nil {
			err = fmt.Errorf("bloom rebuild after %d documents: %w", n, err)
		}
	}
	if err != nil {
		discard()
		return n, err
	}
	pipe = b.rdb.TxPipeline()
	for _, k := range kinds {
		pipe.Rename(ctx, b.buildKey(k), b.key(k))
	}
	pipe.Rename(ctx, b.docs.docsBuilding(), b.docs.docs())
	if _, err := pipe.Exec(ctx); err != nil {
		return n, fmt.Errorf("bloom rebuild: swap in: %w", err)
	}
	return n, nil
}
