package algorithm

import (
	"math/rand/v2"
	"testing"
)

// TestFixedWindowCountRejectedIsCapped is the regression test of an int64
// overflow: with CountRejected every denial added its cost, so 2^23 denials
// of cost MaxLimit in one window wrapped the count below zero, which Step
// reads as an empty key, and the next request was admitted.
func TestFixedWindowCountRejectedIsCapped(t *testing.T) {
	p := Params{Limit: 1, Period: MaxPeriod, CountRejected: true}
	var s FixedWindow
	s, _ = s.Step(p, t0, 1)
	for i := range 1 << 23 {
		var d Decision
		if s, d = s.Step(p, t0, MaxLimit); d.Allowed {
			t.Fatalf("denial %d: allowed", i)
		}
		if got, want := s.Count, p.Limit+1; got != want {
			t.Fatalf("denial %d: count %d, want it capped at Limit+1 = %d", i, got, want)
		}
	}
	if _, d := s.Step(p, t0, 1); d.Allowed {
		t.Errorf("after 2^23 counted denials a request of cost 1 was admitted: %+v", d)
	}
}

func TestFixedWindowSteps(t *testing.T) {
	p3 := Params{Limit: 3, Period: sec}
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{"aligned windows", p3, []step{
			// t0 is a multiple of 1s: the window is [t0, t0+1s).
			{at: t0 + 250*ms, cost: 1, want: allow(3, 2, 750*ms)},
			{at: t0 + 500*ms, cost: 2, want: allow(3, 0, 500*ms)},
			{at: t0 + 500*ms, cost: 1, want: deny(3, 0, 500*ms, 500*ms)},
			// A peek at the limit, not over it, is allowed.
			{at: t0 + 500*ms, cost: 0, want: allow(3, 0, 500*ms)},
			{at: t0 + sec - 1, cost: 1, want: deny(3, 0, 1, 1)},
			{at: t0 + sec, cost: 1, want: allow(3, 2, sec)},
			// 2+3 units pass within 1 µs across a boundary: that is what a
			// fixed window is.
			{at: t0 + 2*sec - 1, cost: 2, want: allow(3, 0, 1)},
			{at: t0 + 2*sec, cost: 3, want: allow(3, 0, sec)},
			// Expired: a peek finds an empty key.
			{at: t0 + 3*sec + 500*ms, cost: 0, want: allow(3, 3, 0)},
			{at: t0 + 3*sec + 500*ms, cost: 4, want: deny(3, 3, 0, Never)},
			{at: t0 + 3*sec + 700*ms, cost: 3, want: allow(3, 0, 300*ms)},
		}},
		{"aligned to the epoch, not to the first request", Params{Limit: 1, Period: 7 * sec}, []step{
			// 1699999200 s = 7 × 242857028 s + 4 s: the window containing
			// t0 began at t0-4s and ends at t0+3s.
			{at: t0, cost: 1, want: allow(1, 0, 3*sec)},
			{at: t0 + 3*sec - 1, cost: 1, want: deny(1, 0, 1, 1)},
			{at: t0 + 3*sec, cost: 1, want: allow(1, 0, 7*sec)},
		}},
		{"first hit", Params{Limit: 3, Period: sec, FirstHit: true}, []step{
			{at: t0 + 250*ms, cost: 2, want: allow(3, 1, sec)},
			// The window is [t0+250ms, t0+1250ms).
			{at: t0 + sec, cost: 1, want: allow(3, 0, 250*ms)},
			{at: t0 + 1250*ms - 1, cost: 1, want: deny(3, 0, 1, 1)},
			{at: t0 + 1250*ms, cost: 1, want: allow(3, 2, sec)},
			// A peek on an expired key starts no window...
			{at: t0 + 5*sec, cost: 0, want: allow(3, 3, 0)},
			// ...so the next request does.
			{at: t0 + 5*sec + 1, cost: 1, want: allow(3, 2, sec)},
			{at: t0 + 6*sec, cost: 3, want: deny(3, 2, 1, 1)},
		}},
		{"cost above capacity", p3, []step{
			{at: t0, cost: 4, want: deny(3, 3, 0, Never)},
			{at: t0, cost: 3, want: allow(3, 0, sec)},
			{at: t0, cost: 4, want: deny(3, 0, sec, Never)},
		}},
		{"count rejected off", p3, []step{
			{at: t0, cost: 2, want: allow(3, 1, sec)},
			{at: t0 + 100*ms, cost: 2, want: deny(3, 1, 900*ms, 900*ms)},
			{at: t0 + 200*ms, cost: 1, want: allow(3, 0, 800*ms)},
			{at: t0 + 300*ms, cost: 5, want: deny(3, 0, 700*ms, Never)},
		}},
		{"count rejected", Params{Limit: 3, Period: sec, CountRejected: true}, []step{
			{at: t0, cost: 2, want: allow(3, 1, sec)},
			// Counted: 4 units in the window.
			{at: t0 + 100*ms, cost: 2, want: deny(3, 0, 900*ms, 900*ms)},
			// Over its limit, the key denies even a peek.
			{at: t0 + 200*ms, cost: 0, want: deny(3, 0, 800*ms, 800*ms)},
			{at: t0 + 300*ms, cost: 1, want: deny(3, 0, 700*ms, 700*ms)},
			{at: t0 + 400*ms, cost: 5, want: deny(3, 0, 600*ms, Never)},
			{at: t0 + sec, cost: 3, want: allow(3, 0, sec)},
		}},
		{"limit 0", Params{Limit: 0, Period: sec}, []step{
			{at: t0, cost: 1, want: deny(0, 0, 0, Never)},
			{at: t0, cost: 0, want: allow(0, 0, 0)},
		}},
		{"limit 0 counting rejections", Params{Limit: 0, Period: sec, CountRejected: true}, []step{
			{at: t0 + 100*ms, cost: 1, want: deny(0, 0, 900*ms, Never)},
			{at: t0 + 200*ms, cost: 0, want: deny(0, 0, 800*ms, 800*ms)},
			{at: t0 + sec, cost: 0, want: allow(0, 0, 0)},
		}},
		{"clock going backwards, aligned", p3, []step{
			{at: t0 + 500*ms, cost: 2, want: allow(3, 1, 500*ms)},
			{at: t0 + 400*ms, cost: 1, want: allow(3, 0, 600*ms)},
			// Back into the previous aligned window: the live window stays,
			// so the key lives longer than a period from now.
			{at: t0 - 1, cost: 1, want: deny(3, 0, sec+1, sec+1)},
			{at: t0 - 1, cost: 0, want: allow(3, 0, sec+1)},
			{at: t0 + sec, cost: 1, want: allow(3, 2, sec)},
		}},
		{"clock going backwards, first hit", Params{Limit: 3, Period: sec, FirstHit: true}, []step{
			{at: t0 + 500*ms, cost: 1, want: allow(3, 2, sec)},
			{at: t0, cost: 1, want: allow(3, 1, 1500*ms)},
			{at: t0 + 1500*ms - 1, cost: 2, want: deny(3, 1, 1, 1)},
			{at: t0 + 1500*ms, cost: 2, want: allow(3, 1, sec)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &fixedM{}, tc.steps)
		})
	}
}

// fixedModel is a fixed window by brute force: it keeps every cost counted
// in the window it last opened, uncapped, and finds RetryAfter by searching
// for the first instant the same request is admitted.
type fixedModel struct {
	p       Params
	start   int64
	counted []int64
}

func (f *fixedModel) count() int64 {
	var n int64
	for _, c := range f.counted {
		n += c
	}
	return n
}

// live reports whether the window is still open at t.
func (f *fixedModel) live(t int64) bool { return f.count() > 0 && t < f.start+f.p.Period }

func (f *fixedModel) admits(t, cost int64) bool {
	if f.live(t) {
		return f.count()+cost <= f.p.Limit
	}
	return cost <= f.p.Limit
}

func (f *fixedModel) step(now, cost int64, _ string, _ LeaseOp) Decision {
	if !f.live(now) {
		f.counted = nil
		f.start = now / f.p.Period * f.p.Period
		if f.p.FirstHit {
			f.start = now
		}
	}
	allowed := f.admits(now, cost)
	if allowed || f.p.CountRejected {
		f.counted = append(f.counted, cost)
	}
	n := f.count()
	d := Decision{Allowed: allowed, Limit: f.p.Limit, Remaining: max(0, f.p.Limit-n)}
	if n > 0 {
		d.ResetAfter = f.start + f.p.Period - now
	}
	switch {
	case allowed:
	case cost > f.p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return f.admits(t, cost) }) - now
	}
	return d
}

func fixedParams(rng *rand.Rand) Params {
	return Params{Limit: rng.Int64N(7), Period: randomPeriod(rng), FirstHit: rng.IntN(2) == 0, CountRejected: rng.IntN(2) == 0}
}

func TestFixedWindowModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 1, 150, 150, fixedParams, func() machine { return &fixedM{} }, func(p Params) model { return &fixedModel{p: p} }, back)
	}
}

// TestFixedWindowAdmits checks what a fixed window promises on sequences
// whose clock never goes backwards: at most Limit units admitted in one
// aligned window, and at most 2*Limit in any Period with either alignment.
func TestFixedWindowAdmits(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 2, 400, 200, fixedParams, func() machine { return &fixedM{} }, false) {
		p := tr.p
		for _, ev := range tr.evs {
			if !p.FirstHit {
				start := ev.now / p.Period * p.Period
				if n := tr.admitted(start, start+p.Period); n > p.Limit {
					t.Fatalf("params %+v: %d units admitted in the window starting at %d", p, n, start)
				}
			}
			if n := tr.admitted(ev.now, ev.now+p.Period); n > 2*p.Limit {
				t.Fatalf("params %+v: %d units admitted in the period from %d", p, n, ev.now)
			}
		}
	}
}
