package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestConcurrencyPeekOverLimit is the regression test of a peek that was
// always allowed: a cost 0 acquire must be decided like any cost (doc.go),
// so it is denied when the key holds more than Limit, which happens when a
// limit is lowered while leases are held.
func TestConcurrencyPeekOverLimit(t *testing.T) {
	var s Concurrency
	s, _ = s.Step(Params{Limit: 3, Period: sec}, t0, 3, "a", LeaseAcquire)
	p := Params{Limit: 1, Period: sec}
	_, d := s.Step(p, t0+100*ms, 0, "b", LeaseAcquire)
	// Units a.0, a.1 and a.2 all expire at t0+1s; 3-1 = 2 of them must go,
	// which is when all three go.
	if got, want := d, (Decision{Limit: 1, ResetAfter: 900 * ms, RetryAfter: 900 * ms}); got != want {
		t.Errorf("peek over the limit: got %+v, want %+v", got, want)
	}
}

func TestConcurrencySteps(t *testing.T) {
	p3 := Params{Limit: 3, Period: 10 * sec}
	acquire := func(at int64, id string, cost int64, want Decision) step {
		return step{at: at, cost: cost, id: id, op: LeaseAcquire, want: want}
	}
	release := func(at int64, id string, cost int64, want Decision) step {
		return step{at: at, cost: cost, id: id, op: LeaseRelease, want: want}
	}
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{"acquire, renew, release, expire", p3, []step{
			acquire(t0, "a", 1, allow(3, 2, 10*sec)),
			acquire(t0+sec, "b", 2, allow(3, 0, 10*sec)),
			// Held: a.0 until 10s, b.0 and b.1 until 11s. One unit for c
			// needs the oldest other unit, a.0, gone...
			acquire(t0+2*sec, "c", 1, deny(3, 0, 9*sec, 8*sec)),
			// ...two units the two oldest: b.0 goes at 11s.
			acquire(t0+2*sec, "c", 2, deny(3, 0, 9*sec, 9*sec)),
			acquire(t0+2*sec, "c", 4, deny(3, 0, 9*sec, Never)),
			// Acquiring again renews: a.0 now until 13s.
			acquire(t0+3*sec, "a", 1, allow(3, 0, 10*sec)),
			// b wants a third unit: its own two do not count, a.0 must go.
			acquire(t0+4*sec, "b", 3, deny(3, 0, 9*sec, 9*sec)),
			release(t0+4*sec, "b", 2, allow(3, 2, 9*sec)),
			acquire(t0+4*sec, "c", 0, allow(3, 2, 9*sec)),
			// Releasing again is harmless.
			release(t0+4*sec, "b", 2, allow(3, 2, 9*sec)),
			// a.0 expires at exactly 13s: the key is empty.
			acquire(t0+13*sec, "c", 0, allow(3, 3, 0)),
			acquire(t0+13*sec, "c", 3, allow(3, 0, 10*sec)),
		}},
		{"retry counts only other leases", p3, []step{
			acquire(t0, "a", 2, allow(3, 1, 10*sec)),
			acquire(t0+sec, "b", 1, allow(3, 0, 10*sec)),
			// a's own units (until 10s) do not count; b.0 goes at 11s.
			acquire(t0+2*sec, "a", 3, deny(3, 0, 9*sec, 9*sec)),
			acquire(t0+11*sec, "a", 3, allow(3, 0, 10*sec)),
		}},
		{"release gives back units 0..cost-1", p3, []step{
			acquire(t0, "a", 3, allow(3, 0, 10*sec)),
			release(t0+sec, "a", 1, allow(3, 1, 9*sec)),
			// a.1 and a.2 are held by a, but not as units 0..0 of this
			// request: they count as others.
			acquire(t0+2*sec, "a", 1, allow(3, 0, 10*sec)),
			acquire(t0+2*sec, "b", 1, deny(3, 0, 10*sec, 8*sec)),
		}},
		{"limit 0", Params{Limit: 0, Period: sec}, []step{
			acquire(t0, "a", 1, deny(0, 0, 0, Never)),
			acquire(t0, "a", 0, allow(0, 0, 0)),
			release(t0, "a", 1, allow(0, 0, 0)),
		}},
		{"clock going backwards", p3, []step{
			acquire(t0+5*sec, "a", 1, allow(3, 2, 10*sec)),
			// b's unit expires before a's: the key lives until a's.
			acquire(t0, "b", 1, allow(3, 1, 15*sec)),
			acquire(t0+10*sec, "c", 0, allow(3, 2, 5*sec)),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &concM{}, tc.steps)
		})
	}
}

// concModel is a concurrency limit by brute force: for each lease ID, the
// expiry of each unit index it holds; units are dropped for good at the
// first step at or after their expiry. RetryAfter is found by search.
type concModel struct {
	p     Params
	units map[string]map[int64]int64 // id -> index -> expires
}

// othersAt counts the units alive at t >= now that are not units
// 0..cost-1 of id.
func (c *concModel) othersAt(t int64, id string, cost int64) int64 {
	var n int64
	for lease, us := range c.units {
		for i, exp := range us {
			if exp > t && (lease != id || i >= cost) {
				n++
			}
		}
	}
	return n
}

func (c *concModel) step(now, cost int64, id string, op LeaseOp) Decision {
	if c.units == nil {
		c.units = map[string]map[int64]int64{}
	}
	for lease, us := range c.units {
		for i, exp := range us {
			if exp <= now {
				delete(us, i)
			}
		}
		if len(us) == 0 {
			delete(c.units, lease)
		}
	}
	allowed := true
	switch {
	case op == LeaseRelease:
		for i := range c.units[id] {
			if i < cost {
				delete(c.units[id], i)
			}
		}
	default:
		allowed = c.othersAt(now, id, cost)+cost <= c.p.Limit
		if allowed && cost > 0 {
			if c.units[id] == nil {
				c.units[id] = map[int64]int64{}
			}
			for i := range cost {
				c.units[id][i] = now + c.p.Period
			}
		}
	}
	var held, last int64
	for _, us := range c.units {
		for _, exp := range us {
			held++
			last = max(last, exp)
		}
	}
	d := Decision{Allowed: allowed, Limit: c.p.Limit, Remaining: max(0, c.p.Limit-held)}
	if held > 0 {
		d.ResetAfter = last - now
	}
	switch {
	case allowed:
	case cost > c.p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return c.othersAt(t, id, cost)+cost <= c.p.Limit }) - now
	}
	return d
}

func concParams(rng *rand.Rand) Params {
	return Params{Limit: rng.Int64N(7), Period: randomPeriod(rng)}
}

func TestConcurrencyModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 11, 150, 150, concParams, func() machine { return &concM{} }, func(p Params) model { return &concModel{p: p} }, back)
	}
}

// TestConcurrencyHolds checks that no more than Limit units are ever held,
// and that the units stay sorted by (Expires, ID, Index).
func TestConcurrencyHolds(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 12, 400, 200, concParams, func() machine { return &concM{} }, true) {
		var s Concurrency
		for _, ev := range tr.evs {
			s, _ = s.Step(tr.p, ev.now, ev.cost, ev.id, ev.op)
			if int64(len(s.Units)) > tr.p.Limit {
				t.Fatalf("params %+v: %d units held", tr.p, len(s.Units))
			}
			if !slices.IsSortedFunc(s.Units, compareUnits) {
				t.Fatalf("units out of order: %v", s.Units)
			}
		}
	}
}
