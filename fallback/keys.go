package fallback

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// keys names every Redis key of one front door. All keys start with the
// configured prefix, so one Redis can hold several deployments.
type keys struct {
	prefix, index string
}

func (k keys) requests() string          { return k.prefix + ":requests" }
func (k keys) dlq() string               { return k.prefix + ":requests:dlq" }
func (k keys) generation() string        { return k.prefix + ":generation:" + k.index }
func (k keys) cache(fresh string) string { return k.prefix + ":cache:" + fresh }
func (k keys) stale(base string) string  { return k.prefix + ":stale:" + base }

// cacheMarks holds, beside a result cache entry, the reading of the
// watermark taken before its search began (see answerAfter).
func (k keys) cacheMarks(fresh string) string { return k.prefix + ":cachemarks:" + fresh }
func (k keys) lock(fresh string) string       { return k.prefix + ":lock:" + fresh }
func (k keys) embedding(text string) string   { return k.embeddingOf(k.index, text) }

// embeddingOf keys a query embedding by the physical index searched (see
// FrontDoor.SetTarget): after an alias moves to an index of another model,
// a vector of the old model must never be sent to the new index.
func (k keys) embeddingOf(index, text string) string {
	return k.prefix + ":emb:" + index + ":" + sha(text)
}
func (k keys) docs() string         { return k.prefix + ":docs:" + k.index }
func (k keys) docsBuilding() string { return k.prefix + ":docs:" + k.index + ":building" }

// replied is the idempotency marker of a request. It is scoped to the
// requester (reply_to) as well as the id: keyed by id alone, a request
// reusing another client's id got its reply while the victim's own request
// was dropped as a duplicate.
func (k keys) replied(replyTo, id string) string {
	return k.prefix + ":replied:" + sha(replyTo+"\x00"+id)
}
func (k keys) failure(entry string) string { return k.prefix + ":fail:" + entry }
func (k keys) reply(id string) string      { return k.prefix + ":reply:" + id }

// families are the prefixes of every key the front door writes other than
// replies; the reply namespace must not overlap any of them.
func (k keys) families() []string {
	p := k.prefix + ":"
	return []string{p + "requests", p + "generation:", p + "cache:", p + "cachemarks:", p + "stale:", p + "lock:", p + "emb:",
		p + "replied:", p + "fail:", p + "bloom:", p + "docs:"}
}

// cacheKeys are the two hashes of a request: base identifies the question
// (normalised query, k, filter, tenant, index) and keys the stale answer, which
// must survive a generation bump; fresh adds the index generation and keys the
// result cache and the miss lock.
type cacheKeys struct {
	base, fresh string
}

func baseKey(index string, r request) string {
	return sha(index + "\x00" + r.Query + "\x00" + strconv.Itoa(r.K) + "\x00" + r.FilterJSON + "\x00" + r.Tenant)
}

// freshKey must match lookupScript, which computes it inside Redis so the hit
// path needs no separate round trip to read the generation.
func freshKey(base string, generation int64) string {
	h := sha1.Sum([]byte(base + ":" + strconv.FormatInt(generation, 10)))
	return hex.EncodeToString(h[:])
}

func requestKeys(index string, generation int64, r request) cacheKeys {
	base := baseKey(index, r)
	return cacheKeys{base: base, fresh: freshKey(base, generation)}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}
