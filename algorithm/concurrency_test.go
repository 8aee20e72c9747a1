package algorithm

import "testing"

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
