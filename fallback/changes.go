package fallback

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ragsync/ragsync/sink"
)

// Changes carries the index's changes to the front door's Redis state, so
// that neither cached nor stale answers keep what the index dropped:
//
//   - the Bloom filters learn every written document and tenant;
//   - the document map <prefix>:docs:<index> (a hash: document id → tenant)
//     follows every write and delete; degraded answers reused from the stale
//     store keep only the hits whose document it still holds, under the
//     request's tenant, so they never cross tenants whatever they reuse;
//   - a delete, a truncate, or a write that moves a document to another
//     tenant bumps the index generation right after the sink committed it,
//     which abandons every fresh cache entry at once: an ok answer holds a
//     deleted or moved document only if its search started before the
//     commit (at most search_timeout + lock_wait earlier).
//
// serve makes it the pipeline's observer (pipeline.Observer), which calls
// Upserting before each write and Upserted, Deleted or Truncated after each
// commit; a failed call fails the write, which the pipeline retries. Rebuild (on Bloom) fills the map, and
// until it has run once every Deleted and Upserted bumps the generation.
// Safe for concurrent use; calls for one document must come in order (the
// pipeline applies one document's changes in order).
type Changes struct {
	rdb   *redis.Client
	keys  keys
	bloom *Bloom
}

// Changes returns the front door's change feed, for the pipeline's
// observer.
func (f *FrontDoor) Changes() *Changes { return &Changes{rdb: f.rdb, keys: f.keys, bloom: f.bloom} }

// tombstone is the document map's value for a document deleted while a
// Rebuild was scanning: the scan's HSETNX must not bring it back.
const tombstone = "\x00"

// builtField keeps the document map alive (Redis drops an empty hash) and
// says that Rebuild has filled it. Document ids are never empty.
const builtField = ""

// upsertedScript records a committed write: the Bloom bits (live filter and
// a rebuild in progress, each only if it exists), the document's tenant in
// the map (and in a rebuild's map), and a generation bump when the tenant
// changed or the map was never built. Returns 1 when it bumped.
//
// KEYS: tenant bitmap, tenant building, doc bitmap, doc building, docs map,
// docs building, generation.
// ARGV: doc id, tenant, number of tenant offsets, tenant offsets…, doc offsets….
var upsertedScript = redis.NewScript(`
local function setbits(key, from, to)
  if from > to or redis.call('EXISTS', key) == 0 then return end
  local args = {'BITFIELD', key}
  for j = from, to do args[#args+1] = 'SET'; args[#args+1] = 'u1'; args[#args+1] = ARGV[j]; args[#args+1] = 1 end
  redis.call(unpack(args))
end
local nt = tonumber(ARGV[3])
setbits(KEYS[1], 4, 3 + nt)
setbits(KEYS[2], 4, 3 + nt)
setbits(KEYS[3], 4 + nt, #ARGV)
setbits(KEYS[4], 4 + nt, #ARGV)
if #KEYS < 5 then return 0 end
if redis.call('EXISTS', KEYS[6]) == 1 then redis.call('HSET', KEYS[6], ARGV[1], ARGV[2]) end
if redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('INCR', KEYS[7])
  return 1
end
local old = redis.call('HGET', KEYS[5], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
if old and old ~= ARGV[2] then
  redis.call('INCR', KEYS[7])
  return 1
end
return 0
`)

// deletedScript records a committed delete: out of the map (a tombstone in a
// rebuild's map), and a generation bump if the map held it or was never
// built. Returns 1 when it bumped.
//
// KEYS: docs map, docs building, generation. ARGV: doc id, tombstone.
var deletedScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('INCR', KEYS[3])
  return 1
end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[3])
  return 1
end
return 0
`)

func (c *Changes) upsertArgs(tenant, docID string) []any {
	var toffs []uint64
	if tenant != "" {
		toffs = c.bloom.offsets(tenant)
	}
	doffs := c.bloom.offsets(docID)
	argv := make([]any, 0, 3+len(toffs)+len(doffs))
	argv = append(argv, docID, tenant, len(toffs))
	for _, o := range toffs {
		argv = append(argv, o)
	}
	for _, o := range doffs {
		argv = append(argv, o)
	}
	return argv
}

func (c *Changes) bloomKeys() []string {
	b := c.bloom
	return []string{b.key(KindTenant), b.buildKey(KindTenant), b.key(KindDoc), b.buildKey(KindDoc)}
}

// Upserting adds the document and its tenant to the Bloom filters before
// the sink writes it, so a filter never rejects a document that is in the
// index (a failure fails the write, which is retried).
func (c *Changes) Upserting(ctx context.Context, tenant, docID string) error {
	if err := upsertedScript.Run(ctx, c.rdb, c.bloomKeys(), c.upsertArgs(tenant, docID)...).Err(); err != nil {
		return fmt.Errorf("frontdoor: record write of %s: %w", docID, err)
	}
	return nil
}

// Upserted records a write the sink committed (Applied or Duplicate, not
// Stale: a stale change's tenant is not the document's): the Bloom bits
// again, for a Rebuild that started since Upserting, the tenant in the
// document map, and a generation bump if the tenant changed.
func (c *Changes) Upserted(ctx context.Context, tenant, docID string) error {
	ks := append(c.bloomKeys(), c.keys.docs(), c.keys.docsBuilding(), c.keys.generation())
	if err := upsertedScript.Run(ctx, c.rdb, ks, c.upsertArgs(tenant, docID)...).Err(); err != nil {
		return fmt.Errorf("frontdoor: record write of %s: %w", docID, err)
	}
	return nil
}

// Deleted records a delete the sink committed (Applied or Duplicate).
func (c *Changes) Deleted(ctx context.Context, docID string) error {
	ks := []string{c.keys.docs(), c.keys.docsBuilding(), c.keys.generation()}
	if err := deletedScript.Run(ctx, c.rdb, ks, docID, tombstone).Err(); err != nil {
		return fmt.Errorf("frontdoor: record delete of %s: %w", docID, err)
	}
	return nil
}

// Truncated records a committed truncate of table: its documents leave the
// map (tombstones in a rebuild's), then the generation is bumped.
func (c *Changes) Truncated(ctx context.Context, table string) error {
	prefix := sink.DocID(table, "")
	for _, key := range []string{c.keys.docs(), c.keys.docsBuilding()} {
		var cursor uint64
		for {
			// HSCAN returns field, value pairs (HSCAN NOVALUES is Redis 7.4+).
			kv, next, err := c.rdb.HScan(ctx, key, cursor, "", 1000).Result()
			if err != nil {
				return fmt.Errorf("frontdoor: record truncate of %s: %w", table, err)
			}
			var gone []string
			for i := 0; i < len(kv); i += 2 {
				if f := kv[i]; f != builtField && strings.HasPrefix(f, prefix) {
					gone = append(gone, f)
				}
			}
			if len(gone) > 0 {
				if err := deleteFromMap(ctx, c.rdb, key, key == c.keys.docsBuilding(), gone); err != nil {
					return fmt.Errorf("frontdoor: record truncate of %s: %w", table, err)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	if err := c.rdb.Incr(ctx, c.keys.generation()).Err(); err != nil {
		return fmt.Errorf("frontdoor: record truncate of %s: %w", table, err)
	}
	return nil
}

func deleteFromMap(ctx context.Context, rdb *redis.Client, key string, building bool, ids []string) error {
	if !building {
		return rdb.HDel(ctx, key, ids...).Err()
	}
	vals := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		vals = append(vals, id, tombstone)
	}
	return rdb.HSet(ctx, key, vals...).Err()
}

// liveHits decodes a stale answer and keeps the hits whose document the map
// still holds under the request's tenant (any tenant when the request has
// none). Without a built map it keeps nothing: a stale answer that cannot
// be checked is not given.
func (f *FrontDoor) liveHits(ctx context.Context, raw string, r request) ([]Hit, error) {
	hits, err := decodeHits(raw)
	if err != nil {
		return nil, err
	}
	if len(hits) == 0 {
		return nil, nil
	}
	fields := make([]string, 0, len(hits)+1)
	fields = append(fields, builtField)
	for _, h := range hits {
		fields = append(fields, h.DocID)
	}
	vals, err := f.rdb.HMGet(ctx, f.keys.docs(), fields...).Result()
	if err != nil {
		return nil, err
	}
	if vals[0] == nil {
		return nil, nil
	}
	out := hits[:0]
	for i, h := range hits {
		tenant, ok := vals[i+1].(string)
		if !ok || tenant == tombstone || (r.Tenant != "" && tenant != r.Tenant) {
			continue
		}
		out = append(out, h)
	}
	return out, nil
}

// encodeWire writes at most k wire hits.
func encodeWire(hits []Hit, k int) []byte {
	b, err := json.Marshal(hits[:min(len(hits), k)])
	if err != nil {
		return emptyResults
	}
	return b
}
