package algorithm

import "strconv"

// Kind is one of the algorithms, for code that handles any of them: a
// store, a model, a validator. State and Small step the algorithm a Kind
// names, and the Kind's methods say what its Params may hold. The Kinds whose state is Small come first, so that a store can
// index a table of them by Kind. The zero Kind is KindFixedWindow, as an
// empty algorithm is a fixed window in floodgate.
type Kind uint8

// The Kinds.
const (
	KindFixedWindow Kind = iota
	KindSlidingWindow
	KindTokenBucket
	KindGCRA
	KindSlidingWindowLog
	KindConcurrency
	// NumKinds is the number of Kinds; every Kind is below it.
	NumKinds
)

// The table of the algorithms' differences that code outside their Step
// needs, by column: the names, then what each Kind takes as a set of
// Kinds (bit k for Kind k), constant so that asking costs a shift, not a
// load: a store or a validator asks on every decision.
var names = [NumKinds]string{
	KindFixedWindow:      "fixed_window",
	KindSlidingWindow:    "sliding_window",
	KindTokenBucket:      "token_bucket",
	KindGCRA:             "gcra",
	KindSlidingWindowLog: "sliding_window_log",
	KindConcurrency:      "concurrency",
}

const (
	// burstKinds take Params.Burst, their capacity.
	burstKinds = 1<<KindTokenBucket | 1<<KindGCRA
	// firstHitKinds take Params.FirstHit.
	firstHitKinds = 1 << KindFixedWindow
	// countRejectedKinds take Params.CountRejected.
	countRejectedKinds = 1<<KindFixedWindow | 1<<KindSlidingWindow
	// perUnitKinds keep one entry per unit: their Limit is at most
	// MaxLogLimit.
	perUnitKinds = 1<<KindSlidingWindowLog | 1<<KindConcurrency
	// twoPeriodKinds keep a key for two periods: their Period is at most
	// MaxPeriod/2.
	twoPeriodKinds = 1 << KindSlidingWindow
	// smallKinds keep O(1) integers, a Small.
	smallKinds = 1<<KindFixedWindow | 1<<KindSlidingWindow | 1<<KindTokenBucket | 1<<KindGCRA
	// reservableKinds have a Refund.
	reservableKinds = smallKinds | 1<<KindSlidingWindowLog
)

// ParseKind returns the Kind of an algorithm's name, as in config files,
// the HTTP API and Redis keys ("fixed_window"), and whether it is one.
func ParseKind(name string) (Kind, bool) {
	// A switch of constant strings compares lengths and words inline:
	// every decision of a store names its algorithm.
	switch name {
	case "fixed_window":
		return KindFixedWindow, true
	case "sliding_window":
		return KindSlidingWindow, true
	case "token_bucket":
		return KindTokenBucket, true
	case "gcra":
		return KindGCRA, true
	case "sliding_window_log":
		return KindSlidingWindowLog, true
	case "concurrency":
		return KindConcurrency, true
	}
	return 0, false
}

// String is the algorithm's name, as ParseKind reads it.
func (k Kind) String() string {
	if k >= NumKinds {
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
	return names[k]
}

// Small reports whether the algorithm keeps O(1) integers per key, its
// state a Small: FixedWindow, SlidingWindow, TokenBucket and GCRA.
func (k Kind) Small() bool { return smallKinds>>k&1 != 0 }

// Burst reports whether Params.Burst is the algorithm's capacity
// (TokenBucket, GCRA); every other algorithm's capacity is Limit.
func (k Kind) Burst() bool { return burstKinds>>k&1 != 0 }

// FirstHit reports whether the algorithm takes Params.FirstHit
// (FixedWindow).
func (k Kind) FirstHit() bool { return firstHitKinds>>k&1 != 0 }

// CountRejected reports whether the algorithm takes Params.CountRejected
// (FixedWindow, SlidingWindow).
func (k Kind) CountRejected() bool { return countRejectedKinds>>k&1 != 0 }

// MaxLimit is the largest Limit of the algorithm: MaxLogLimit for
// SlidingWindowLog and Concurrency, which keep one entry per unit,
// MaxLimit for the others.
func (k Kind) MaxLimit() int64 {
	if perUnitKinds>>k&1 != 0 {
		return MaxLogLimit
	}
	return MaxLimit
}

// MaxPeriod is the longest Period of the algorithm, in microseconds:
// MaxPeriod/2 for SlidingWindow, which keeps a key for two periods,
// MaxPeriod for the others.
func (k Kind) MaxPeriod() int64 {
	if twoPeriodKinds>>k&1 != 0 {
		return MaxPeriod / 2
	}
	return MaxPeriod
}

// Reservable reports whether the algorithm has a Refund, which
// reservations need: every one but Concurrency, whose leases are holds
// already.
func (k Kind) Reservable() bool { return reservableKinds>>k&1 != 0 }
