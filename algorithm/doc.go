// Package algorithm holds every rate limiting algorithm of Floodgate once,
// as a pure state machine: a state type per algorithm with a method
//
//	func (s State) Step(p Params, now, cost int64) (State, Decision)
//
// and no I/O, clock or lock. The memory store runs Step under a lock, the
// Redis store's Lua scripts mirror it line for line (same names, same
// integer arithmetic), the conformance suite and the linearizability checker
// use it as the sequential model.
//
// Code that handles any algorithm names it by a Kind and keeps its state
// in a State (or a Small, for the algorithms of O(1) integers), whose
// methods run the Step, Refund and Expires of the algorithm the Kind
// names: the one place an algorithm is chosen. The Kind's methods say
// what its Params may hold.
//
// # Units and rounding
//
// Every quantity is an int64 and every time an integer number of
// microseconds since the Unix epoch; there are no floats in any state or
// decision, so Go and Lua round alike. Every intermediate value stays below
// MaxExact (2^52), which floodgate.Limit.Validate enforces, because Lua
// numbers are doubles. Durations in a Decision are rounded up to the next
// microsecond: a client that waits RetryAfter is never early.
//
// cost is the number of units a request takes, >= 0. Cost 0 is a peek: it
// is decided like any other cost (so it is allowed unless the key is already
// over its limit), reports Remaining, and changes no state. A cost above the
// capacity (Limit, or Burst for the buckets) can never succeed: it is
// denied with RetryAfter = Never (-1). A Limit of 0 denies every cost above
// 0, with RetryAfter = Never.
//
// A denied request changes no state, except with CountRejected (only the
// two counting algorithms accept it), where it still adds its cost, up to
// Limit+1 for FixedWindow and Limit for SlidingWindow, so that no count
// grows without bound.
//
// In every Decision: Limit is the capacity (the largest Remaining can be);
// Remaining is the largest cost that would be admitted right after this
// step; ResetAfter is the time until the key is back to its empty state,
// the zero state (where Remaining == Limit), 0 if it already is, and is also how long a store keeps the key (its TTL);
// RetryAfter is 0 when allowed, else the time until
// the same request would be admitted if nothing else happened, or Never.
//
// # The algorithms
//
// FixedWindow ("fixed_window"): at most Limit units per window of Period.
// With aligned windows (the default) a window starts at a multiple of Period
// since the epoch (the calendar minute for one minute); with FirstHit a
// window starts at the first request that finds no live window. Remaining =
// Limit - count; ResetAfter = window end - now while the count is above 0;
// RetryAfter = window end - now. Up to 2*Limit units can pass within one
// Period across a window boundary; that is what a fixed window is.
//
// SlidingWindowLog ("sliding_window_log"): at most Limit units in any
// trailing Period, exactly: one log entry per admitted unit, entries at or
// before now-Period dropped. Remaining = Limit - entries; ResetAfter = newest
// entry + Period - now; RetryAfter = the time the oldest entries have left so
// that cost fits. Memory O(Limit) per key, so Limit <= MaxLogLimit.
//
// SlidingWindow ("sliding_window"): the sliding window counter of
// Cloudflare's write-up, a weighted estimate of the trailing Period from two
// aligned windows: admitted if prev*(Period-e)/Period + curr + cost <=
// Limit, with e the time since the current window began. The comparison is
// exact: it is made on the ceiling of the weighted term, which is at most an
// integer exactly when the fraction is. Remaining = Limit -
// ceil(prev*(Period-e)/Period) - curr; ResetAfter = until both counts have
// left (the end of the next window if curr > 0); RetryAfter = the first microsecond at which the
// shrinking weight of the previous window lets cost fit, computed in closed
// form. The estimate assumes the previous window's requests were spread
// evenly, so it can admit more or less than a log would; memory is O(1).
// (Limit+1)*Period must not exceed MaxExact (Period in microseconds): for
// instance at most 52 thousand per day, 1.25 million per hour; and since a
// key lives until the end of the next window, Period is at most
// MaxPeriod/2.
//
// TokenBucket ("token_bucket"): a bucket of Burst tokens, full at first,
// that gains Limit tokens per Period, one every T = Period/Limit, kept exact
// with a fraction of a microsecond in units of 1/Limit (3 per second is one
// token every 333333 1/3 µs, with no drift). Admitted if the whole tokens in
// the bucket are at least cost. Remaining = whole tokens left; ResetAfter =
// until the bucket is full; RetryAfter = until cost whole tokens are there.
//
// GCRA ("gcra"): the generic cell rate algorithm, a virtual-scheduling
// leaky bucket that keeps one instant (the theoretical arrival time)
// instead of a count and an instant. While the clock does not go backwards
// it admits exactly what TokenBucket with the same Params admits and reports
// the same Remaining, ResetAfter and RetryAfter (a test checks this on
// random sequences). When the clock goes back before the last instant a
// token was credited, GCRA is the stricter: TokenBucket keeps the tokens it
// credited, while GCRA counts back from its one instant as if they were not
// earned yet.
//
// Concurrency ("concurrency"): at most Limit units held at once by leases.
// A lease of cost n holds n units under its ID until now+Period (its TTL)
// or until it is released; acquiring the same ID again renews it. Remaining
// = Limit - held; ResetAfter = until the last lease expires; RetryAfter =
// until enough of the oldest other leases expire. Memory O(Limit).
//
// # Reservations
//
// A reservation takes the upper bound of a request's cost now and settles
// the actual cost later. Reserve takes units as Step does and returns a
// Hold; Settle commits the actual cost (Refund of the difference, or Step
// of the excess) or cancels (Refund of all); Expire ends a hold nobody
// settled, leaving its units charged unless it was made with Release.
// Every algorithm but Concurrency (whose leases are holds already) has a
// Refund, which gives back what the algorithm still counts of units
// admitted at an instant, no more. Each hold is settled exactly once
// (Hold.State), and a retry of the step that settled it gets the first
// answer. Reserving n and committing a <= n at one instant leaves the
// state a request of cost a leaves (a test checks it on random
// histories), and a late refund leaves the state a refund at the expiry
// would have left by now. The table of each step, and what each
// algorithm's Refund gives back, is in [docs/reservations.md].
//
// # Burst
//
// Burst is the capacity of TokenBucket and GCRA: the most units admitted at
// once after an idle spell, and the largest cost that can ever be admitted.
// It defaults to Limit (floodgate.Limit fills it in), so "10 per second"
// admits 10 at once and then one every 100 ms. Limit/Period is the
// sustained rate. Burst may be above Limit (100 per minute, bursts of 300)
// or below it (smoothing: 10 per second, at most 2 at once).
//
// The window algorithms have no burst: their capacity is Limit.
// [docs/library.md] compares Burst with x/time/rate's, redis_rate's,
// nginx's and throttled's.
//
// [docs/reservations.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/reservations.md#what-each-step-does
// [docs/library.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/library.md#burst
package algorithm
