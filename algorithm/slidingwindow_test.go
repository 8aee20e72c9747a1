package algorithm

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestSlidingWindowSteps(t *testing.T) {
	p10 := Params{Limit: 10, Period: sec}
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{"weighted estimate", p10, []step{
			// Window [t0, t0+1s): curr 4, then 10.
			{at: t0 + 500*ms, cost: 4, want: allow(10, 6, 1500*ms)},
			{at: t0 + 900*ms, cost: 6, want: allow(10, 0, 1100*ms)},
			// In the next window prev = 10 weighs 10*(1s-e)/1s, which is
			// at most 9 from e = 1s - floor(9s/10) = 100 ms on: room for 1.
			{at: t0 + 900*ms, cost: 1, want: deny(10, 0, 1100*ms, 200*ms)},
			// e = 250 ms: the weight is 10 × 0.75 = 7.5, Remaining
			// 10 - ceil(7.5) = 2.
			{at: t0 + 1250*ms, cost: 0, want: allow(10, 2, 750*ms)},
			// 4 fits once 10*(1s-e)/1s <= 6: e = 1s - floor(6s/10) = 400 ms.
			{at: t0 + 1250*ms, cost: 4, want: deny(10, 2, 750*ms, 150*ms)},
			// 1 µs earlier the exact weight is 6.00001: 6.00001+4 is above
			// 10, so the comparison, exact, denies.
			{at: t0 + 1400*ms - 1, cost: 4, want: deny(10, 3, 600*ms+1, 1)},
			// The weight is exactly 6: 6+4 fits.
			{at: t0 + 1400*ms, cost: 4, want: allow(10, 0, 1600*ms)},
			// Window [t0+2s, t0+3s): prev 4 weighs 4 × 0.5 = 2, Remaining 8.
			// 9 fits once 4*(1s-e)/1s <= 1: e = 1s - floor(1s/4) = 750 ms.
			{at: t0 + 2500*ms, cost: 9, want: deny(10, 8, 500*ms, 250*ms)},
			// 10 needs a weight of 0, which the exact fraction reaches only
			// at the end of the window: it fits at t0+3s.
			{at: t0 + 2500*ms, cost: 10, want: deny(10, 8, 500*ms, 500*ms)},
			{at: t0 + 3*sec - 1, cost: 10, want: deny(10, 9, 1, 1)},
			{at: t0 + 3*sec, cost: 10, want: allow(10, 0, 2*sec)},
			// Two windows later both counts have left.
			{at: t0 + 5*sec, cost: 0, want: allow(10, 10, 0)},
			{at: t0 + 5*sec, cost: 11, want: deny(10, 10, 0, Never)},
		}},
		{"Remaining below Limit until ResetAfter", p10, []step{
			{at: t0 + 900*ms, cost: 1, want: allow(10, 9, 1100*ms)},
			// prev 1 weighs 1 × 0.5: Remaining is 10 - ceil(0.5) = 9.
			{at: t0 + 1500*ms, cost: 0, want: allow(10, 9, 500*ms)},
			// Even 1 µs before the window ends the weight is above 0.
			{at: t0 + 2*sec - 1, cost: 0, want: allow(10, 9, 1)},
			{at: t0 + 2*sec - 1, cost: 10, want: deny(10, 9, 1, 1)},
			{at: t0 + 2*sec, cost: 0, want: allow(10, 10, 0)},
		}},
		{"retry in the window after next", Params{Limit: 20, Period: 10}, []step{
			{at: t0, cost: 20, want: allow(20, 0, 20)},
			// Cost 1 fits 1 µs into the next window: 20 × 9/10 = 18.
			{at: t0, cost: 1, want: deny(20, 0, 20, 11)},
			// Cost 20 needs a weight of 0, but 20 × 1/10 = 2 even at the
			// last microsecond of the next window: it fits in the one
			// after, when the key is empty.
			{at: t0, cost: 20, want: deny(20, 0, 20, 20)},
			{at: t0 + 19, cost: 20, want: deny(20, 18, 1, 1)},
			{at: t0 + 20, cost: 20, want: allow(20, 0, 20)},
		}},
		{"count rejected off", p10, []step{
			{at: t0 + 500*ms, cost: 8, want: allow(10, 2, 1500*ms)},
			// 5 fits once 8*(1s-e)/1s <= 5: e = 1s - floor(5s/8) = 375 ms.
			{at: t0 + 600*ms, cost: 5, want: deny(10, 2, 1400*ms, 775*ms)},
			{at: t0 + 700*ms, cost: 2, want: allow(10, 0, 1300*ms)},
		}},
		{"count rejected", Params{Limit: 10, Period: sec, CountRejected: true}, []step{
			{at: t0 + 500*ms, cost: 8, want: allow(10, 2, 1500*ms)},
			// Counted, saturating at Limit: curr 10. 5 fits once
			// 10*(1s-e)/1s <= 5: e = 1s - floor(5s/10) = 500 ms.
			{at: t0 + 600*ms, cost: 5, want: deny(10, 0, 1400*ms, 900*ms)},
			// At the limit, not over it: a peek is allowed.
			{at: t0 + 700*ms, cost: 0, want: allow(10, 0, 1300*ms)},
			{at: t0 + 700*ms, cost: 11, want: deny(10, 0, 1300*ms, Never)},
			{at: t0 + 1500*ms, cost: 5, want: allow(10, 0, 1500*ms)},
		}},
		{"limit 0", Params{Limit: 0, Period: sec}, []step{
			{at: t0, cost: 1, want: deny(0, 0, 0, Never)},
			{at: t0, cost: 0, want: allow(0, 0, 0)},
		}},
		{"clock going backwards", p10, []step{
			{at: t0 + 1500*ms, cost: 5, want: allow(10, 5, 1500*ms)},
			// Back into the previous window: the state stays in the window
			// of t0+1s, with 0 elapsed.
			{at: t0 + 900*ms, cost: 1, want: allow(10, 4, 2100*ms)},
			// Window of t0+2s: prev 6 weighs 3 at e = 500 ms.
			{at: t0 + 2500*ms, cost: 0, want: allow(10, 7, 500*ms)},
			// Back again: prev weighs all of its 6.
			{at: t0 + 1900*ms, cost: 0, want: allow(10, 4, 1100*ms)},
			// The state stays in the window of t0+2s: 5 fits once
			// 6*(1s-e)/1s <= 5 there, e = 1s - floor(5s/6) = 166667 µs.
			{at: t0 + 1900*ms, cost: 5, want: deny(10, 4, 1100*ms, 266_667)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &slidingM{}, tc.steps)
		})
	}
}

// slidingModel is the sliding window counter of the package doc, written
// out: the weight Prev*(Period-e)/Period is an exact big.Rat compared as a
// fraction, Remaining is the largest cost whose exact estimate fits, and
// RetryAfter is found by searching for the first instant the same request
// is admitted.
type slidingModel struct {
	p                 Params
	start, prev, curr int64
}

// view is the window, counts and elapsed time a request at t sees.
func (s *slidingModel) view(t int64) (start, prev, curr, e int64) {
	w := t / s.p.Period * s.p.Period
	switch {
	case s.prev == 0 && s.curr == 0:
		return w, 0, 0, t - w
	case w < s.start: // the clock went back: stay, with nothing elapsed
		return s.start, s.prev, s.curr, 0
	case w == s.start:
		return w, s.prev, s.curr, t - w
	case w == s.start+s.p.Period:
		return w, s.curr, 0, t - w
	}
	return w, 0, 0, t - w
}

func (s *slidingModel) weight(prev, e int64) *big.Rat {
	r := new(big.Rat).SetFrac(big.NewInt(prev), big.NewInt(s.p.Period))
	return r.Mul(r, new(big.Rat).SetInt64(s.p.Period-e))
}

// fits reports whether the exact weight of prev at e is at most room.
func (s *slidingModel) fits(prev, e, room int64) bool {
	return s.weight(prev, e).Cmp(new(big.Rat).SetInt64(room)) <= 0
}

func (s *slidingModel) admits(t, cost int64) bool {
	_, prev, curr, e := s.view(t)
	return s.fits(prev, e, s.p.Limit-curr-cost)
}

func (s *slidingModel) step(now, cost int64, _ string, _ LeaseOp) Decision {
	start, prev, curr, e := s.view(now)
	allowed := s.fits(prev, e, s.p.Limit-curr-cost)
	if allowed {
		curr += cost
	} else if s.p.CountRejected {
		curr = min(curr+cost, s.p.Limit)
	}
	s.start, s.prev, s.curr = start, prev, curr
	// The largest cost c with w + curr + c <= Limit: floor(Limit - curr - w).
	left := new(big.Rat).Sub(new(big.Rat).SetInt64(s.p.Limit-curr), s.weight(prev, e))
	rem := new(big.Int).Div(left.Num(), left.Denom()).Int64() // Euclidean: floor for a positive denominator
	d := Decision{Allowed: allowed, Limit: s.p.Limit, Remaining: max(0, rem)}
	switch {
	case curr > 0:
		d.ResetAfter = start + 2*s.p.Period - now
	case prev > 0:
		d.ResetAfter = start + s.p.Period - now
	}
	switch {
	case allowed:
	case cost > s.p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return s.admits(t, cost) }) - now
	}
	return d
}

func slidingParams(rng *rand.Rand) Params {
	p := Params{Limit: rng.Int64N(12), Period: randomPeriod(rng), CountRejected: rng.IntN(2) == 0}
	if rng.IntN(4) == 0 {
		p.Limit = rng.Int64N(200) // Limit above Period: the weight stays above 0
	}
	return p
}

func TestSlidingWindowModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 5, 150, 150, slidingParams, func() machine { return &slidingM{} }, func(p Params) model { return &slidingModel{p: p} }, back)
	}
}

// TestSlidingWindowAdmits checks on sequences whose clock never goes
// backwards that at most Limit units are admitted in one aligned window.
func TestSlidingWindowAdmits(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 6, 400, 200, slidingParams, func() machine { return &slidingM{} }, false) {
		p := tr.p
		for _, ev := range tr.evs {
			start := ev.now / p.Period * p.Period
			if n := tr.admitted(start, start+p.Period); n > p.Limit {
				t.Fatalf("params %+v: %d units admitted in the window starting at %d", p, n, start)
			}
		}
	}
}

// TestSlidingWindowRetryClosedForm checks slidingFirst, the closed form of
// the first instant the weight lets a request fit, against a search over
// every elapsed time, for every small prev, room and period.
func TestSlidingWindowRetryClosedForm(t *testing.T) {
	for period := int64(1); period <= 12; period++ {
		p := Params{Period: period}
		m := slidingModel{p: p}
		for prev := int64(0); prev <= 30; prev++ {
			for room := int64(-1); room <= 31; room++ {
				wantE, wantOK := int64(0), false
				for e := range period {
					if m.fits(prev, e, room) {
						wantE, wantOK = e, true
						break
					}
				}
				e, ok := slidingFirst(p, prev, room)
				if ok != wantOK || ok && e != wantE {
					t.Errorf("period %d prev %d room %d: slidingFirst = %d, %v; want %d, %v", period, prev, room, e, ok, wantE, wantOK)
				}
			}
		}
	}
}
