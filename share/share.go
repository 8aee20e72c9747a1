// Package share splits a limit among parties by their demand, with a
// floor for each: the allocation math of regional budgets (package region)
// and of Envoy's rate limit quota service (package server/rlqs), which
// splits a limit among the Envoys that report a bucket, and of the Redis
// store's rate slices (a token bucket's or GCRA's rate split among the
// instances, store/redisstore). It is pure arithmetic on int64 units: no
// clock, no I/O, the standard library only.
//
// Split is the one entry point. Every policy keeps three promises, which
// the table tests and FuzzSplit check on every input:
//
//   - the shares never add up to more than the limit (and add up to
//     exactly the limit when there is at least one party and the limit is
//     above zero: no unit is left unallocated);
//   - no share is negative;
//   - when the floors fit in the limit, every party gets at least its
//     floor; when they do not, the limit is split in proportion to the
//     floors instead.
//
// # Fairness against utilisation
//
// A share left idle in a quiet party is a unit a busy party is denied.
// Proportional (the default) gives each party its floor and the rest in
// proportion to recent demand, so when demand is steady the shares match
// it and almost nothing idles: utilisation close to one central counter's.
// Its price is fairness under overload: a party with twice the demand gets
// twice the units, so a noisy party can take most of the limit from the
// others, down to their floors. MaxMin fills demand from the smallest up
// (max-min fairness): a party asking for less than an equal part gets all
// it asks, and the big askers split the rest evenly, so no party can crowd
// another out; its price is that a party whose demand grows past an even
// part waits for the others' demand to fall before it gets more. Equal is
// the static split (limit ÷ parties, ignoring demand and floors): fair and
// simple, and the worst utilisation when demand is uneven (a party with
// 70% of the demand is held to a third of the limit).
//
// Floors are the other trade-off. A floor keeps units with a party whose
// demand is zero, so its first request after a quiet spell is admitted
// without waiting for a rebalance, and in package region it is what a
// party may safely keep deciding on when it loses contact. Every unit of
// floor held by an idle party is a unit the busy ones cannot use: the
// utilisation lost to floors is at most the sum of the idle parties'
// floors.
package share

import (
	"fmt"
	"math/bits"
	"slices"
)

// Party is one claimant of a limit. The zero value asks for nothing and
// keeps nothing.
type Party struct {
	// Demand is the party's recent demand, in units per period of the
	// limit: 700 for a party that asked for 700 of a limit of 1000 per
	// second in the last second. Negative counts as 0; values above
	// MaxDemand count as MaxDemand.
	Demand int64
	// Floor is the least the party keeps whatever its demand (when the
	// floors fit in the limit). Negative counts as 0.
	Floor int64
}

// MaxDemand is the largest demand Split tells apart: 2^50 units per
// period. A larger demand is taken as MaxDemand.
const MaxDemand = 1 << 50

// Policy is how Split shares out what the floors leave. The zero value is
// Proportional.
type Policy int

const (
	// Proportional gives each party its floor, then the rest of the limit
	// in proportion to Demand (evenly when no party has any demand). With
	// a limit of 1000, floors of 50 and demands 700, 200, 100: 50 each,
	// then 850 split 595, 170, 85, so 645, 220, 135.
	Proportional Policy = iota
	// MaxMin gives each party its floor, then fills the demand above the
	// floors evenly from the smallest up (max-min fairness), then splits
	// what is left evenly. With a limit of 1000, no floors and demands
	// 700, 200, 100: 100 and 200 are met, 700 gets 700, nothing is left.
	// With demands 900, 600, 100: 100 is met, the other two get 450 each.
	MaxMin
	// Equal is the static split: the limit divided evenly, ignoring
	// demand and floors (the first parties get one more unit each when it
	// does not divide). 1000 among three: 334, 333, 333.
	Equal
)

// String is the policy's name in options and flags: proportional, max_min
// or equal.
func (p Policy) String() string {
	switch p {
	case Proportional:
		return "proportional"
	case MaxMin:
		return "max_min"
	case Equal:
		return "equal"
	}
	return "unknown"
}

// ParsePolicy returns the policy named s (proportional, max_min or
// equal), as String writes it.
func ParsePolicy(s string) (Policy, error) {
	for _, p := range []Policy{Proportional, MaxMin, Equal} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("share: unknown policy %q (want proportional, max_min or equal)", s)
}

// Split divides limit among parties under policy p and returns each
// party's share, in the parties' order. A limit at or below zero, or no
// parties, gives zero shares. An unknown policy is taken as Proportional.
// Split is deterministic: equal inputs give equal shares, and when units
// do not divide evenly the earlier parties get the odd units.
func Split(limit int64, parties []Party, p Policy) []int64 {
	out := make([]int64, len(parties))
	if limit <= 0 || len(parties) == 0 {
		return out
	}
	if p == Equal {
		apportion(limit, weights(parties, func(Party) int64 { return 1 }), out)
		return out
	}
	floors := weights(parties, func(q Party) int64 { return q.Floor })
	var floorSum int64
	for _, f := range floors {
		floorSum = satAdd(floorSum, f)
	}
	if floorSum >= limit {
		// The floors take everything: in proportion to them.
		apportion(limit, floors, out)
		return out
	}
	copy(out, floors)
	rest := limit - floorSum
	demand := weights(parties, func(q Party) int64 { return min(q.Demand, MaxDemand) })
	switch p {
	case MaxMin:
		wants := make([]int64, len(parties))
		for i, d := range demand {
			wants[i] = max(0, d-floors[i])
		}
		rest = fill(rest, wants, out)
		if rest > 0 {
			apportion(rest, weights(parties, func(Party) int64 { return 1 }), out)
		}
	default:
		if sum(demand) == 0 {
			demand = weights(parties, func(Party) int64 { return 1 })
		}
		apportion(rest, demand, out)
	}
	return out
}

// weights returns f of each party, negative values as 0.
func weights(parties []Party, f func(Party) int64) []int64 {
	w := make([]int64, len(parties))
	for i, q := range parties {
		w[i] = max(0, f(q))
	}
	return w
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s = satAdd(s, x)
	}
	return s
}

// satAdd is a+b for a, b >= 0, saturating at the largest int64.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// apportion adds to out[i] party i's part of total in proportion to w[i]
// (all >= 0, at least one above 0), by the largest remainder: each gets
// the floor of total×w[i]/W, then the units left over go one each to the
// largest fractional parts, the earlier party first on a tie. The parts
// add up to total exactly. The products are 128-bit, so nothing
// overflows.
func apportion(total int64, w []int64, out []int64) {
	// Halve the weights until their sum fits in 63 bits; a weight above
	// zero stays at least 1.
	for sum(w) == 1<<63-1 {
		for i := range w {
			if w[i] > 0 {
				w[i] = max(1, w[i]/2)
			}
		}
	}
	W := uint64(sum(w))
	if W == 0 {
		return
	}
	type rem struct {
		i int
		r uint64
	}
	rems := make([]rem, 0, len(w))
	var given int64
	for i, wi := range w {
		hi, lo := bits.Mul64(uint64(total), uint64(wi))
		q, r := bits.Div64(hi, lo, W) // q <= total, since wi <= W
		out[i] += int64(q)
		given += int64(q)
		if wi > 0 {
			rems = append(rems, rem{i, r})
		}
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return 0
	})
	// Fewer than len(rems) units are left: each of the sum of remainders
	// over W is below 1.
	for k := 0; given < total && k < len(rems); k++ {
		out[rems[k].i]++
		given++
	}
}

// fill gives each party up to wants[i] more of total, evenly from the
// smallest want up (water-filling), adding to out, and returns what is
// left. Each pass either meets the smallest unmet want or spends
// everything, so it takes at most len(wants)+1 passes.
func fill(total int64, wants []int64, out []int64) int64 {
	given := make([]int64, len(wants))
	active := make([]int, 0, len(wants))
	for i, w := range wants {
		if w > 0 {
			active = append(active, i)
		}
	}
	for len(active) > 0 && total > 0 {
		k := int64(len(active))
		each := total / k
		if each == 0 {
			// Fewer units than parties: one each, earlier parties first.
			for _, i := range active[:int(total)] {
				given[i]++
			}
			total = 0
			break
		}
		step := each
		for _, i := range active {
			step = min(step, wants[i]-given[i])
		}
		next := active[:0]
		for _, i := range active {
			given[i] += step
			total -= step
			if given[i] < wants[i] {
				next = append(next, i)
			}
		}
		active = next
	}
	for i, g := range given {
		out[i] += g
	}
	return total
}
