package algorithm

import (
	"cmp"
	"slices"
)

// Unit is one unit held by a concurrency lease: a lease of cost n holds the
// units with Index 0..n-1 under its ID, each until Expires (microseconds).
// The Redis mirror stores each unit as the sorted-set member "ID.Index" with
// score Expires.
type Unit struct {
	ID      string
	Index   int64
	Expires int64
}

// Concurrency is the state of a concurrency limit: the units held by live
// leases, in ascending order of (Expires, ID, Index). The zero value is an
// empty key. Mirrored by store/redisstore/scripts/concurrency.lua.
type Concurrency struct {
	Units []Unit
}

// LeaseOp is what a concurrency step does with its lease.
type LeaseOp uint8

const (
	// LeaseAcquire takes (or renews) cost units under the lease ID for Period.
	LeaseAcquire LeaseOp = iota
	// LeaseRelease gives back the units 0..cost-1 of the lease ID.
	LeaseRelease
)

// Step applies op for lease id at now. Units that expired at or before now
// are dropped first. Acquire is admitted if the units held by other leases
// plus cost are at most Limit; it then holds units 0..cost-1 of id until
// now+Period, replacing those id held (so acquiring again renews). Release
// always succeeds. Cost 0 is a peek. Step reuses the capacity of s.Units.
func (s Concurrency) Step(p Params, now, cost int64, id string, op LeaseOp) (Concurrency, Decision) {
	units := slices.DeleteFunc(s.Units, func(u Unit) bool { return u.Expires <= now })
	own := func(u Unit) bool { return u.ID == id && u.Index < cost }
	ownHeld := int64(0)
	for _, u := range units {
		if own(u) {
			ownHeld++
		}
	}
	others := int64(len(units)) - ownHeld
	allowed := true
	if op == LeaseRelease {
		units = slices.DeleteFunc(units, own)
	} else {
		// A peek (cost 0) is decided like any cost: denied only when the
		// key is over its limit (a limit lowered below what is held).
		allowed = others+cost <= p.Limit
		if allowed && cost > 0 {
			units = slices.DeleteFunc(units, own)
			for i := range cost {
				units = append(units, Unit{ID: id, Index: i, Expires: now + p.Period})
			}
			slices.SortFunc(units, compareUnits)
		}
	}
	held := int64(len(units))
	d := Decision{Allowed: allowed, Limit: p.Limit, Remaining: max(0, p.Limit-held)}
	if held > 0 {
		d.ResetAfter = units[held-1].Expires - now
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		// The k oldest units of other leases must expire first.
		k := others + cost - p.Limit
		for _, u := range units {
			if own(u) {
				continue
			}
			if k--; k == 0 {
				d.RetryAfter = u.Expires - now
				break
			}
		}
	}
	return Concurrency{Units: units}, d
}

func compareUnits(a, b Unit) int {
	return cmp.Or(cmp.Compare(a.Expires, b.Expires), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Index, b.Index))
}

// Expires is when the last unit expires; 0 if none is held.
func (s Concurrency) Expires(Params) int64 {
	if len(s.Units) == 0 {
		return 0
	}
	return s.Units[len(s.Units)-1].Expires
}
