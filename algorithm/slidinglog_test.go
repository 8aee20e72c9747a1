package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSlidingWindowLogSteps(t *testing.T) {
	p3 := Params{Limit: 3, Period: sec}
	tests := []struct {
		name  string
		p     Params
		steps []step
	}{
		{"trailing period", p3, []step{
			{at: t0, cost: 1, want: allow(3, 2, sec)},
			{at: t0 + 200*ms, cost: 1, want: allow(3, 1, sec)},
			{at: t0 + 400*ms, cost: 1, want: allow(3, 0, sec)},
			// Log [0, 200, 400] ms: the entry at 0 leaves at t0+1s.
			{at: t0 + 500*ms, cost: 1, want: deny(3, 0, 900*ms, 500*ms)},
			{at: t0 + sec - 1, cost: 1, want: deny(3, 0, 400*ms+1, 1)},
			// An entry at exactly now-Period is out.
			{at: t0 + sec, cost: 1, want: allow(3, 0, sec)},
			// Log [200, 400, 1000]: cost 2 needs the 2nd oldest, 400, gone.
			{at: t0 + 1100*ms, cost: 2, want: deny(3, 0, 900*ms, 300*ms)},
			// 200 is gone, [400, 1000] left.
			{at: t0 + 1400*ms - 1, cost: 2, want: deny(3, 1, 600*ms+1, 1)},
			{at: t0 + 1400*ms, cost: 2, want: allow(3, 0, sec)},
			// Log [1400, 1400]: both entries of that request leave at once.
			{at: t0 + 2*sec, cost: 3, want: deny(3, 1, 400*ms, 400*ms)},
			{at: t0 + 2*sec, cost: 4, want: deny(3, 1, 400*ms, Never)},
			{at: t0 + 2*sec, cost: 0, want: allow(3, 1, 400*ms)},
			{at: t0 + 2400*ms, cost: 3, want: allow(3, 0, sec)},
			{at: t0 + 5*sec, cost: 0, want: allow(3, 3, 0)},
		}},
		{"no burst across a window boundary", p3, []step{
			{at: t0 + sec - 1, cost: 3, want: allow(3, 0, sec)},
			{at: t0 + sec, cost: 1, want: deny(3, 0, sec-1, sec-1)},
			{at: t0 + 2*sec - 1, cost: 1, want: allow(3, 2, sec)},
		}},
		{"cost above capacity", p3, []step{
			{at: t0, cost: 4, want: deny(3, 3, 0, Never)},
			{at: t0, cost: 3, want: allow(3, 0, sec)},
		}},
		{"limit 0", Params{Limit: 0, Period: sec}, []step{
			{at: t0, cost: 1, want: deny(0, 0, 0, Never)},
			{at: t0, cost: 0, want: allow(0, 0, 0)},
		}},
		{"clock going backwards", p3, []step{
			{at: t0 + 500*ms, cost: 1, want: allow(3, 2, sec)},
			// Inserted before the later entry; the key lives until 500+1000.
			{at: t0 + 200*ms, cost: 1, want: allow(3, 1, 1300*ms)},
			{at: t0 + 300*ms, cost: 1, want: allow(3, 0, 1200*ms)},
			// Log [200, 300, 500]: the oldest leaves at 1200.
			{at: t0 + 100*ms, cost: 1, want: deny(3, 0, 1400*ms, 1100*ms)},
			{at: t0 + 1200*ms, cost: 1, want: allow(3, 0, sec)},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &logM{}, tc.steps)
		})
	}
}

// logModel is a sliding window log by brute force: the time of every unit
// admitted, unsorted, each dropped for good once it is at or before
// now-Period at some step; RetryAfter by search.
type logModel struct {
	p       Params
	entries []int64
}

// live counts the entries a request at t >= the last step's now sees.
func (l *logModel) live(t int64) int64 {
	var n int64
	for _, e := range l.entries {
		if e > t-l.p.Period {
			n++
		}
	}
	return n
}

func (l *logModel) step(now, cost int64, _ string, _ LeaseOp) Decision {
	var kept []int64
	for _, e := range l.entries {
		if e > now-l.p.Period {
			kept = append(kept, e)
		}
	}
	l.entries = kept
	allowed := l.live(now)+cost <= l.p.Limit
	if allowed {
		for range cost {
			l.entries = append(l.entries, now)
		}
	}
	d := Decision{Allowed: allowed, Limit: l.p.Limit, Remaining: max(0, l.p.Limit-int64(len(l.entries)))}
	if len(l.entries) > 0 {
		d.ResetAfter = slices.Max(l.entries) + l.p.Period - now
	}
	switch {
	case allowed:
	case cost > l.p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return l.live(t)+cost <= l.p.Limit }) - now
	}
	return d
}

func logParams(rng *rand.Rand) Params {
	return Params{Limit: rng.Int64N(7), Period: randomPeriod(rng)}
}

func TestSlidingWindowLogModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 3, 150, 150, logParams, func() machine { return &logM{} }, func(p Params) model { return &logModel{p: p} }, back)
	}
}

// TestSlidingWindowLogAdmits checks the promise of the log on sequences
// whose clock never goes backwards: at most Limit units admitted in any
// trailing Period, and never more than Limit entries kept.
func TestSlidingWindowLogAdmits(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 4, 400, 200, logParams, func() machine { return &logM{} }, false) {
		p := tr.p
		var s SlidingWindowLog
		for _, ev := range tr.evs {
			if n := tr.admitted(ev.now-p.Period+1, ev.now+1); n > p.Limit {
				t.Fatalf("params %+v: %d units admitted in the period up to %d", p, n, ev.now)
			}
			if s, _ = s.Step(p, ev.now, ev.cost); int64(len(s.Log)) > p.Limit {
				t.Fatalf("params %+v: %d entries kept", p, len(s.Log))
			}
		}
	}
}
