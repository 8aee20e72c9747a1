package algorithm

import "math/bits"

// MaxExact is the largest integer every intermediate value of an algorithm
// may reach: 2^52. Lua numbers are IEEE doubles, exact to 2^53; keeping one
// bit of headroom lets the Lua mirror correct a floating division by one
// step without leaving the exact range. floodgate.Limit.Validate enforces
// it.
const MaxExact int64 = 1 << 52

// MaxPeriod is the longest period, in microseconds: 2^48 µs, about 8.9 years.
// It keeps "now + a period" (now is about 2^50.7 µs in 2026) below MaxExact.
const MaxPeriod int64 = 1 << 48

// MaxLimit is the largest Limit or Burst of any algorithm: 2^40 units.
const MaxLimit int64 = 1 << 40

// MaxLogLimit is the largest Limit of the algorithms that keep one entry per
// admitted unit (SlidingWindowLog, Concurrency): their memory per key is
// O(Limit), so the bound is memory per key.
const MaxLogLimit int64 = 100_000

// Never is the RetryAfter of a request that can never be admitted: its cost
// exceeds the capacity of the limit (Limit, or Burst for the buckets).
const Never int64 = -1

// Params is a limit in the integer form every Step takes. Times are integer
// microseconds. Callers build it from floodgate.Limit, which validates it;
// Check repeats the checks that keep the arithmetic exact.
type Params struct {
	// Limit is the number of units admitted per Period (FixedWindow,
	// SlidingWindowLog, SlidingWindow), the refill rate in units per Period
	// (TokenBucket, GCRA), or the number of units held at once
	// (Concurrency). Zero denies every request of cost above zero.
	Limit int64
	// Period is the window length, the refill period, or the lease TTL, in
	// microseconds. Always above zero.
	Period int64
	// Burst is the capacity of TokenBucket and GCRA: the most units admitted
	// at once after an idle spell. Zero elsewhere.
	Burst int64
	// FirstHit makes a FixedWindow start at the key's first request instead
	// of at a multiple of Period since the Unix epoch.
	FirstHit bool
	// CountRejected makes a denied request of FixedWindow or SlidingWindow
	// add its cost to the count.
	CountRejected bool
	// Calendar, when not nil, makes a FixedWindow's windows the calendar
	// windows it holds (Calendar.Windows, around the time of the
	// decision): a new window is the one of them that contains now, and
	// the state keeps where its window ends (FixedWindow.Next). Period is
	// then an upper bound of a window (MaxCalendarPeriod), not its length.
	// Nil for every other limit.
	Calendar *Windows
	// Wait, above zero, lets a TokenBucket request that finds too few
	// tokens be admitted at a future slot: the bucket goes into debt by
	// the tokens it lacks, provided the last of them is credited within
	// Wait intervals of now (a debt of at most Wait units). The units owed
	// are kept as the bucket's last credit moved into the future, so every
	// later request, waiting or not, queues behind them. Set only by a
	// reservation that waits (floodgate.Limiter.Schedule); Wait*Limit
	// obeys the bounds of Burst*Limit. 0 for every other request and
	// algorithm.
	Wait int64
}

// Decision is what a Step answers. It mirrors floodgate.Decision with times
// in integer microseconds.
type Decision struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Limit is the capacity: the largest Remaining can be (Burst for the
	// buckets, Limit elsewhere).
	Limit int64
	// Remaining is the largest cost admissible right after this step, >= 0.
	Remaining int64
	// ResetAfter is the time until the key is back to its empty state (the
	// zero state, where Remaining == Limit), in microseconds, rounded up; 0
	// if it is empty. It is Expires - now.
	ResetAfter int64
	// RetryAfter is 0 when allowed; otherwise the time until a request of the
	// same cost would be admitted if nothing else happened, rounded up, or
	// Never.
	RetryAfter int64
}

// floorDiv is a/b rounded down for a >= 0, b > 0. The Lua mirror computes
// math.floor(a / b) and corrects it by one step; in Go the integer division
// is already exact.
func floorDiv(a, b int64) int64 { return a / b }

// instant is a point in time: us microseconds plus frac/l of a microsecond,
// 0 <= frac < l, where l is the Limit of the rate it belongs to. TokenBucket
// and GCRA keep time this way so that an emission interval of Period/Limit
// (333333 1/3 µs for 3 per second) is exact and no rounding drifts the rate.
type instant struct{ us, frac int64 }

// rate is the emission interval T = Period/Limit = q + r/l microseconds.
type rate struct{ q, r, l int64 }

func newRate(limit, period int64) rate {
	return rate{q: period / limit, r: period % limit, l: limit}
}

// times is n*T for 0 <= n <= MaxLimit with n*r <= MaxExact.
func (t rate) times(n int64) instant {
	x := n * t.r
	if x < t.l {
		// No whole microsecond to carry (always so for n = 1): spare the
		// division.
		return instant{us: n * t.q, frac: x}
	}
	return instant{us: n*t.q + x/t.l, frac: x % t.l}
}

func (t rate) add(a, b instant) instant {
	us, frac := a.us+b.us, a.frac+b.frac
	if frac >= t.l {
		us, frac = us+1, frac-t.l
	}
	return instant{us, frac}
}

func (t rate) sub(a, b instant) instant {
	us, frac := a.us-b.us, a.frac-b.frac
	if frac < 0 {
		us, frac = us-1, frac+t.l
	}
	return instant{us, frac}
}

// norm re-reads a stored instant under the current limit: a fraction kept
// under a larger earlier limit is clamped (an error below one microsecond).
func (t rate) norm(a instant) instant {
	if a.frac >= t.l {
		a.frac = t.l - 1
	}
	if a.frac < 0 {
		a.frac = 0
	}
	return a
}

func (a instant) less(b instant) bool {
	return a.us < b.us || (a.us == b.us && a.frac < b.frac)
}

// ceil is the instant rounded up to a whole microsecond.
func (a instant) ceil() int64 {
	if a.frac > 0 {
		return a.us + 1
	}
	return a.us
}

// count is floor(d/T), at most max: how many whole intervals fit in d, for
// 0 <= d <= max*T; 0 for d < 0 or max < 0. With d = us + frac/l and T = period/l it is
// floor((us*l + frac) / period), computed exactly in 128 bits. The Lua
// mirror, which has only doubles, gets the same integer from a floating
// estimate corrected by exact comparisons.
func (t rate) count(d instant, max int64) int64 {
	// Less than one interval, or room for one at most: one comparison with
	// T = q + r/l decides, without dividing.
	if max <= 0 || d.us < t.q || d.us == t.q && d.frac < t.r || d.us < 0 {
		return 0
	}
	if max == 1 {
		return 1
	}
	hi, lo := bits.Mul64(uint64(d.us), uint64(t.l))
	lo, carry := bits.Add64(lo, uint64(d.frac), 0)
	hi += carry
	period := uint64(t.q*t.l + t.r)
	if hi >= period { // the quotient would not fit in 64 bits
		return max
	}
	n, _ := bits.Div64(hi, lo, period)
	if n > uint64(max) {
		return max
	}
	return int64(n)
}
