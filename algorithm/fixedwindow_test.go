package algorithm

import "testing"

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
