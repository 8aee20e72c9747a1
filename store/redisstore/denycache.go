package redisstore

import (
	"time"

	"github.com/floodgate-rl/floodgate"
)

// A denial is a key known to be over its limit: Redis denied a request of
// cost at least cost under limit, and said it could not admit it again
// before until (local time, see local).
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

// putDenial stores e for key in sh, whose lock the caller holds, at local
// time now. A full shard first drops the expired denials among a few it
// samples (Go's map iteration starts at a random place), or, if none has
// expired, the one of them that ends first.
func (l *local) putDenial(sh *localShard, key string, e *denial, now time.Time) {
	if _, ok := sh.deny[key]; !ok && len(sh.deny) >= l.denyCap {
		const sample = 8
		var first string
		var firstUntil time.Time
		n := 0
		for k, old := range sh.deny {
			if !now.Before(old.until) {
				delete(sh.deny, k)
			} else if first == "" || old.until.Before(firstUntil) {
				first, firstUntil = k, old.until
			}
			if n++; n == sample {
				break
			}
		}
		if len(sh.deny) >= l.denyCap {
			delete(sh.deny, first)
		}
	}
	sh.deny[key] = e
}
