// Package direct is the path from floodgate.Limiter to a store that
// decides in this process (the memory store) without a floodgate.Request
// or the Store interface's copies: the Limiter validates the limit, finds
// the store's Decider once (in New), and hands it the limit's parts in
// registers. It is internal so that only a caller that has validated the
// limit can reach it: a Small from anywhere else could hold a zero
// period.
package direct

import "github.com/floodgate-rl/floodgate/algorithm"

// Small is a decision of an O(1) algorithm (Kind.Small) on a key with no
// time of its own, whose limit and cost floodgate.Request.Validate
// accepts and whose limit is neither calendar nor durable: Params are
// Limit.Params(), Key carries the Limiter's prefix. It is the Request the
// general path would send, in parts.
type Small struct {
	Key   string
	Kind  algorithm.Kind
	Flags Flags // Params.FirstHit and CountRejected
	Limit int64
	// Period is in µs.
	Period int64
	Burst  int64
	Cost   int64
}

// Flags are the boolean Params of a Small, one bit each: with them in
// one field, a Small is eight words, which the Go calling convention
// passes (with a method's receiver) in registers.
type Flags uint8

// The Flags.
const (
	FirstHit Flags = 1 << iota
	CountRejected
)

// Params is s's algorithm.Params.
func (s Small) Params() algorithm.Params {
	return algorithm.Params{Limit: s.Limit, Period: s.Period, Burst: s.Burst, FirstHit: s.Flags&FirstHit != 0, CountRejected: s.Flags&CountRejected != 0}
}

// Decider is a store with a direct path. DecideSmall decides s as the
// store's Apply decides the Request s stands for, and returns Apply's
// Decision in parts: the algorithm.Decision's fields (durations in µs,
// retryAfterUS algorithm.Never for never) and the time it was made at
// (µs since the epoch, by the store's clock). ok false means the store
// cannot take s directly (the caller then calls Apply) and nothing was
// decided. DecideSmall does not look at a context: the caller checks
// its own before the call, as Apply would first.
//
// The results are scalars, not an algorithm.Decision: a struct of more
// than four fields returned by a call is stored to memory a field at a
// time and copied with wide loads that wait for those stores.
type Decider interface {
	DecideSmall(s Small) (allowed bool, limit, remaining, resetAfterUS, retryAfterUS, nowUS int64, ok bool)
}
