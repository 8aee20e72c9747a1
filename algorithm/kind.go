package algorithm

import "strconv"

// Kind is one of the algorithms, for code that handles any of them: a
// store, a model, a validator. Params.Kind says which one a limit runs,
// State and Small step it, and the Kind's methods say what its Params may
// hold. The Kinds whose state is Small come first, so that a store can
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

// kinds is what each Kind is called and what it takes: the one table of
// the algorithms' differences that code outside their Step needs.
var kinds = [NumKinds]struct {
	name string
	// burst: Params.Burst is its capacity (the buckets).
	burst bool
	// firstHit, countRejected: it takes Params.FirstHit,
	// Params.CountRejected.
	firstHit, countRejected bool
	// maxLimit is the largest Params.Limit: MaxLogLimit where the state
	// keeps one entry per unit.
	maxLimit int64
	// maxPeriod is the largest Params.Period: MaxPeriod/2 where a key
	// lives for two periods.
	maxPeriod int64
}{
	KindFixedWindow:      {name: "fixed_window", firstHit: true, countRejected: true, maxLimit: MaxLimit, maxPeriod: MaxPeriod},
	KindSlidingWindow:    {name: "sliding_window", countRejected: true, maxLimit: MaxLimit, maxPeriod: MaxPeriod / 2},
	KindTokenBucket:      {name: "token_bucket", burst: true, maxLimit: MaxLimit, maxPeriod: MaxPeriod},
	KindGCRA:             {name: "gcra", burst: true, maxLimit: MaxLimit, maxPeriod: MaxPeriod},
	KindSlidingWindowLog: {name: "sliding_window_log", maxLimit: MaxLogLimit, maxPeriod: MaxPeriod},
	KindConcurrency:      {name: "concurrency", maxLimit: MaxLogLimit, maxPeriod: MaxPeriod},
}

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
	return kinds[k].name
}

// Small reports whether the algorithm keeps O(1) integers per key, its
// state a Small: FixedWindow, SlidingWindow, TokenBucket and GCRA.
func (k Kind) Small() bool { return k < KindSlidingWindowLog }

// Burst reports whether Params.Burst is the algorithm's capacity
// (TokenBucket, GCRA); every other algorithm's capacity is Limit.
func (k Kind) Burst() bool { return k < NumKinds && kinds[k].burst }

// FirstHit reports whether the algorithm takes Params.FirstHit
// (FixedWindow).
func (k Kind) FirstHit() bool { return k < NumKinds && kinds[k].firstHit }

// CountRejected reports whether the algorithm takes Params.CountRejected
// (FixedWindow, SlidingWindow).
func (k Kind) CountRejected() bool { return k < NumKinds && kinds[k].countRejected }

// MaxLimit is the largest Limit of the algorithm: MaxLogLimit for
// SlidingWindowLog and Concurrency, which keep one entry per unit,
// MaxLimit for the others.
func (k Kind) MaxLimit() int64 {
	if k >= NumKinds {
		return MaxLimit
	}
	return kinds[k].maxLimit
}

// MaxPeriod is the longest Period of the algorithm, in microseconds:
// MaxPeriod/2 for SlidingWindow, which keeps a key for two periods,
// MaxPeriod for the others.
func (k Kind) MaxPeriod() int64 {
	if k >= NumKinds {
		return MaxPeriod
	}
	return kinds[k].maxPeriod
}

// Reservable reports whether the algorithm has a Refund, which
// reservations need: every one but Concurrency, whose leases are holds
// already.
func (k Kind) Reservable() bool { return k < KindConcurrency }
