package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// denyCache is the layer of Options.DenyCache, the first below Apply: it
// remembers keys that Redis denied, and denies their requests itself, with
// no round trip, until the denial's RetryAfter; every other request goes
// to next, the local budgets. Requests with their own Now (their time is
// not the store's), of cost 0 (they change nothing), of a limit with a
// LocalBudget (the local budgets remember their denials themselves,
// whatever DenyCache says), or of an algorithm whose denials do not hold
// (denialCacheable) pass through.
type denyCache struct {
	next   decider
	clock  localClock
	cap    int // the most remembered denials per shard
	shards *shards[*denial]
	hits   atomic.Int64 // requests denied in process (LocalStats)
}

var _ decider = (*denyCache)(nil)

// newDenyCache returns a deny cache of about size keys above next.
func newDenyCache(size int, clock localClock, next decider) *denyCache {
	return &denyCache{next: next, clock: clock, cap: max(1, (size+localShards-1)/localShards), shards: newShards[*denial]()}
}

func (dc *denyCache) decide(ctx context.Context, c call) (floodgate.Decision, error) {
	r := &c.r
	if !r.Now.IsZero() || r.Cost <= 0 || r.Limit.LocalBudget > 0 || !denialCacheable(r.Limit, c.alg) {
		return dc.next.decide(ctx, c)
	}
	sh := dc.shards.of(c.key)
	sent := dc.clock.now()
	sh.mu.Lock()
	if e := sh.m[c.key]; e != nil {
		if d, ok := e.serve(r.Limit, r.Cost, sent); ok {
			sh.mu.Unlock()
			dc.hits.Add(1)
			return d, nil
		}
	}
	sh.mu.Unlock()
	d, err := dc.next.decide(ctx, c)
	if err == nil && !d.Allowed {
		if e, ok := newDenial(r.Limit, r.Cost, d, sent); ok {
			sh.mu.Lock()
			dc.put(sh, c.key, e, sent)
			sh.mu.Unlock()
		}
	}
	return d, err
}

// forget drops the denial of key, if any (a Reset through this store).
func (dc *denyCache) forget(key string) { dc.shards.forget(key) }

// A denial is a key known to be over its limit: Redis denied a request of
// cost at least cost under limit, and said it could not admit it again
// before until (local time, see local.go).
type denial struct {
	limit   floodgate.Limit
	cost    int64
	until   time.Time
	resetAt time.Time // local time of the state's reset, as last known
	max     int64     // Decision.Limit as last known
}

// denialCacheable reports whether a denial of limit stays true until its
// RetryAfter whatever else happens: when nothing but time frees budget.
// Other requests only consume budget, so a denial's RetryAfter, the
// earliest time the same cost fits if nothing else is admitted, only comes
// later. Concurrency frees budget on Release, and a sliding window that
// counts rejections would have counted the denials served here (into the
// next window's estimate), so neither is cached. A fixed window that counts
// rejections is: its first counted denial already fills the window
// (count = limit+1) until the window's end, which is its RetryAfter.
func denialCacheable(l floodgate.Limit, alg floodgate.Algorithm) bool {
	switch alg {
	case floodgate.Concurrency:
		return false
	case floodgate.SlidingWindow:
		return !l.CountRejected
	}
	return true
}

// newDenial remembers d, a denial of a request of cost made with limit,
// sent at local time sent; ok is false when there is nothing to remember
// (RetryAfter Never is for a cost above the limit, which the algorithm
// denies by itself).
func newDenial(limit floodgate.Limit, cost int64, d floodgate.Decision, sent time.Time) (*denial, bool) {
	if d.Allowed || d.RetryAfter == floodgate.Never || d.RetryAfter <= 0 {
		return nil, false
	}
	span := clockMargin(d.RetryAfter)
	if span <= 0 {
		return nil, false
	}
	return &denial{limit: limit, cost: cost, until: sent.Add(span), resetAt: sent.Add(d.ResetAfter), max: d.Limit}, true
}

// serve returns the remembered denial for a request of cost under limit at
// local time now, if it still holds: same limit, a cost no smaller (a
// larger cost takes at least as long to fit), before until.
func (e *denial) serve(limit floodgate.Limit, cost int64, now time.Time) (floodgate.Decision, bool) {
	if e.limit != limit || cost < e.cost || !now.Before(e.until) {
		return floodgate.Decision{}, false
	}
	return floodgate.Decision{
		Limit:      e.max,
		ResetAfter: max(0, e.resetAt.Sub(now)),
		RetryAfter: e.until.Sub(now),
		Now:        now,
	}, true
}

// put stores e for key in sh, whose lock the caller holds, at local time
// now. A full shard first drops the expired denials among a few it samples
// (Go's map iteration starts at a random place), or, if none has expired,
// the one of them that ends first.
func (dc *denyCache) put(sh *shard[*denial], key string, e *denial, now time.Time) {
	if _, ok := sh.m[key]; !ok && len(sh.m) >= dc.cap {
		const sample = 8
		var first string
		var firstUntil time.Time
		n := 0
		for k, old := range sh.m {
			if !now.Before(old.until) {
				delete(sh.m, k)
			} else if first == "" || old.until.Before(firstUntil) {
				first, firstUntil = k, old.until
			}
			if n++; n == sample {
				break
			}
		}
		if len(sh.m) >= dc.cap {
			delete(sh.m, first)
		}
	}
	sh.m[key] = e
}
