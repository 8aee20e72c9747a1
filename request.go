package floodgate

import (
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// The longest texts of a Request, and the RetryAfter of one that can
// never pass.
const (
	// MaxKeyLen is the longest Request.Key, in bytes: 1 MiB. Stores that
	// need a shorter key (Redis) hash long keys.
	MaxKeyLen = 1 << 20
	// MaxLeaseLen is the longest lease ID (and reservation ID), in bytes.
	MaxLeaseLen = 64

	// Never is the RetryAfter of a request that can never be admitted,
	// because its cost is above the limit's capacity or the limit is 0.
	// Retrying it is pointless.
	Never time.Duration = -1
)

// Request asks a store to decide cost units for one key under one limit.
// Most callers use a Limiter, which builds Requests; stores receive them.
type Request struct {
	// Key is the subject being limited ("user:42"): any bytes, not empty, at
	// most MaxKeyLen. Each algorithm keeps its own state per key.
	Key string
	// Limit is the policy; it must be valid.
	Limit Limit
	// Cost is the number of units taken, 0 to MaxLimit. 0 is a peek: decided
	// like any cost, it consumes nothing. The zero Request is therefore a
	// peek; Limiter.Allow sends 1.
	Cost int64
	// Now is the time of the decision. The zero time means the store's
	// clock: the Redis server's TIME, or the memory store's Clock. Set it for
	// deterministic tests, or to use the caller's clock.
	Now time.Time
	// Lease identifies a Concurrency lease: 1 to MaxLeaseLen bytes of
	// [A-Za-z0-9_-]. Required to acquire (Cost > 0) or release; acquiring an
	// ID again renews it. Limiter.Acquire makes random IDs.
	Lease string
	// Release gives the lease's Cost units back instead of acquiring them.
	Release bool
}

// Validate reports the first problem of the request, wrapping
// ErrInvalidRequest or ErrInvalidLimit and naming the field. It allocates
// nothing for a valid request.
func (r *Request) Validate() error {
	switch {
	case r.Key == "":
		return fieldErr(ErrInvalidRequest, "key", "empty")
	case len(r.Key) > MaxKeyLen:
		return fieldErr(ErrInvalidRequest, "key", "%d bytes is above the maximum %d", len(r.Key), MaxKeyLen)
	case r.Cost < 0:
		return fieldErr(ErrInvalidRequest, "cost", "%d is negative", r.Cost)
	case r.Cost > MaxLimit:
		return fieldErr(ErrInvalidRequest, "cost", "%d is above the maximum %d", r.Cost, MaxLimit)
	}
	if !r.Now.IsZero() {
		if us := r.Now.UnixMicro(); us < 0 || us > maxNowMicros {
			return fieldErr(ErrInvalidRequest, "now", "%v is outside %v to %v", r.Now,
				time.UnixMicro(0).UTC(), time.UnixMicro(maxNowMicros).UTC())
		}
	}
	if !r.Limit.valid() {
		return r.Limit.invalid()
	}
	concurrency := r.Limit.Algorithm == Concurrency
	switch {
	case !concurrency && (r.Lease != "" || r.Release):
		return fieldErr(ErrInvalidRequest, "lease", "only concurrency limits take a lease")
	case concurrency && r.Lease == "" && (r.Cost > 0 || r.Release):
		return fieldErr(ErrInvalidRequest, "lease", "a concurrency limit needs a lease ID to acquire or release (use Limiter.Acquire)")
	case len(r.Lease) > MaxLeaseLen:
		return fieldErr(ErrInvalidRequest, "lease", "%d bytes is above the maximum %d", len(r.Lease), MaxLeaseLen)
	}
	for i := 0; i < len(r.Lease); i++ {
		c := r.Lease[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fieldErr(ErrInvalidRequest, "lease", "byte %q at %d is not one of [A-Za-z0-9_-]", c, i)
		}
	}
	return nil
}

// Decision is the answer to a Request. A denial is a Decision with Allowed
// false, never an error.
type Decision struct {
	// Allowed reports whether the request was admitted (and its cost taken).
	Allowed bool
	// Limit is the capacity of the limit: the largest Remaining can be
	// (Burst for TokenBucket and GCRA, Limit otherwise). 60 for 60 per minute.
	Limit int64
	// Remaining is the largest cost that would be admitted right now, >= 0:
	// 59 after the first request of 60 per minute.
	Remaining int64
	// ResetAfter is the time until the key is back to its empty state
	// (where Remaining == Limit, though a SlidingWindow may get there
	// sooner); 0 if it already is. For a fixed window with a count above 0,
	// the time until the window ends.
	ResetAfter time.Duration
	// RetryAfter is 0 when allowed. When denied, it is the time until the
	// same request would be admitted if nothing else happened, or Never.
	RetryAfter time.Duration
	// Now is the time the store decided at: the Redis server's clock by
	// default, Request.Now when it was set.
	Now time.Time
	// Fallback reports a decision of the local store of FailLocal, made
	// with this instance's share of the limit (so Limit is the share)
	// while the shared store was failing.
	Fallback bool
}

// FromAlgorithm converts a decision of the algorithm package, made at nowUS
// microseconds since the epoch, into a Decision. Stores use it.
func FromAlgorithm(d algorithm.Decision, nowUS int64) Decision {
	retry := time.Duration(d.RetryAfter) * time.Microsecond
	if d.RetryAfter == algorithm.Never {
		retry = Never
	}
	// One composite literal in the return: the Decision is written once,
	// straight into the result.
	return Decision{
		Allowed:    d.Allowed,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		ResetAfter: time.Duration(d.ResetAfter) * time.Microsecond,
		RetryAfter: retry,
		Now:        time.UnixMicro(nowUS),
	}
}

// Combine folds the decisions of several limits checked together (a batch)
// into one: allowed only if all are; the smallest Remaining (with its Limit);
// the longest ResetAfter; the longest RetryAfter of the denials, or Never if
// any denial is for ever. It is what a caller of Limiter.AllowEach acts on.
func Combine(ds []Decision) Decision {
	if len(ds) == 0 {
		return Decision{Allowed: true}
	}
	out := ds[0]
	for _, d := range ds[1:] {
		out.Allowed = out.Allowed && d.Allowed
		out.Fallback = out.Fallback || d.Fallback
		if d.Remaining < out.Remaining {
			out.Remaining, out.Limit = d.Remaining, d.Limit
		}
		out.ResetAfter = max(out.ResetAfter, d.ResetAfter)
		if out.RetryAfter == Never || d.RetryAfter == Never {
			out.RetryAfter = Never
		} else {
			out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		}
		if d.Now.After(out.Now) {
			out.Now = d.Now
		}
	}
	if out.Allowed {
		out.RetryAfter = 0
	}
	return out
}
