package algorithm

import (
	"math/rand/v2"
	"testing"
)

func TestKindNames(t *testing.T) {
	want := []string{"fixed_window", "sliding_window", "token_bucket", "gcra", "sliding_window_log", "concurrency"}
	for k := range NumKinds {
		if got := k.String(); got != want[k] {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want[k])
		}
		if got, ok := ParseKind(k.String()); got != k || !ok {
			t.Errorf("ParseKind(%q) = %v, %v, want %v, true", k.String(), got, ok, k)
		}
	}
	for _, name := range []string{"", "Fixed_Window", "leaky_bucket", "gcra "} {
		if k, ok := ParseKind(name); ok {
			t.Errorf("ParseKind(%q) = %v, true, want false", name, k)
		}
	}
	if got, want := NumKinds.String(), "Kind(6)"; got != want {
		t.Errorf("NumKinds.String() = %q, want %q", got, want)
	}
}

func TestKindTakes(t *testing.T) {
	tests := []struct {
		k                                                 Kind
		small, burst, firstHit, countRejected, reservable bool
		maxLimit, maxPeriod                               int64
	}{
		{KindFixedWindow, true, false, true, true, true, MaxLimit, MaxPeriod},
		{KindSlidingWindow, true, false, false, true, true, MaxLimit, MaxPeriod / 2},
		{KindTokenBucket, true, true, false, false, true, MaxLimit, MaxPeriod},
		{KindGCRA, true, true, false, false, true, MaxLimit, MaxPeriod},
		{KindSlidingWindowLog, false, false, false, false, true, MaxLogLimit, MaxPeriod},
		{KindConcurrency, false, false, false, false, false, MaxLogLimit, MaxPeriod},
	}
	for _, tc := range tests {
		t.Run(tc.k.String(), func(t *testing.T) {
			k := tc.k
			got := []any{k.Small(), k.Burst(), k.FirstHit(), k.CountRejected(), k.Reservable(), k.MaxLimit(), k.MaxPeriod()}
			want := []any{tc.small, tc.burst, tc.firstHit, tc.countRejected, tc.reservable, tc.maxLimit, tc.maxPeriod}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("Small, Burst, FirstHit, CountRejected, Reservable, MaxLimit, MaxPeriod = %v, want %v", got, want)
					break
				}
			}
		})
	}
}

// TestStateIsEachAlgorithm checks that State (and through it Small) runs
// the algorithm its Kind names: on random sequences of steps, refunds
// and leases, the same decisions, refunds, expiries and states as the
// algorithm's own type.
func TestStateIsEachAlgorithm(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 3))
	for k := range NumKinds {
		t.Run(k.String(), func(t *testing.T) {
			for range 300 {
				p := Params{Limit: 1 + rng.Int64N(8), Period: 1 + rng.Int64N(5*sec)}
				if k.Burst() {
					p.Burst = 1 + rng.Int64N(12)
				}
				p.FirstHit = k.FirstHit() && rng.IntN(2) == 0
				p.CountRejected = k.CountRejected() && rng.IntN(2) == 0
				s := State{Kind: k}
				typed := newTyped(k)
				now := t0 + rng.Int64N(sec)
				for i := range 40 {
					now += rng.Int64N(p.Period/p.Limit + 2)
					cost := rng.Int64N(p.Limit + 2)
					if k.Reservable() && rng.IntN(4) == 0 {
						at := now - rng.Int64N(p.Period+1)
						var back int64
						s, back = s.Refund(p, now, at, cost)
						if want := typed.refund(p, now, at, cost); back != want {
							t.Fatalf("%+v step %d: Refund(%d at %d) = %d, want %d", p, i, cost, at, back, want)
						}
					} else {
						id, op := string(rune('a'+rng.IntN(3))), LeaseOp(rng.IntN(2))
						var d Decision
						s, d = s.StepLease(p, now, cost, id, op)
						if want := typed.step(p, now, cost, id, op); d != want {
							t.Fatalf("%+v step %d: StepLease(%d, %s, %d) = %+v, want %+v", p, i, cost, id, op, d, want)
						}
					}
					if got, want := s.Expires(p), typed.expires(p); got != want {
						t.Fatalf("%+v step %d: Expires = %d, want %d", p, i, got, want)
					}
					if got, want := s, typed.state(); !got.Equal(want) {
						t.Fatalf("%+v step %d: state %+v, want %+v", p, i, got, want)
					}
				}
			}
		})
	}
}

// newTyped is the zero state of k, in its own type.
func newTyped(k Kind) typedState {
	switch k {
	case KindSlidingWindow:
		return &slidingT{}
	case KindTokenBucket:
		return &bucketT{}
	case KindGCRA:
		return &gcraT{}
	case KindSlidingWindowLog:
		return &logT{}
	case KindConcurrency:
		return &concT{}
	}
	return &fixedT{}
}

// typedState is the state of one algorithm in its own type, with what
// TestStateIsEachAlgorithm compares.
type typedState interface {
	machine
	refund(p Params, now, at, units int64) int64
	state() State
}

type fixedT struct{ fixedM }

func (m *fixedT) refund(p Params, now, at, units int64) (back int64) {
	m.s, back = m.s.Refund(p, now, at, units)
	return back
}
func (m *fixedT) state() State { return State{Small: Small{A: m.s.Start, B: m.s.Count}} }

type slidingT struct{ slidingM }

func (m *slidingT) refund(p Params, now, at, units int64) (back int64) {
	m.s, back = m.s.Refund(p, now, at, units)
	return back
}
func (m *slidingT) state() State {
	return State{Kind: KindSlidingWindow, Small: Small{m.s.Start, m.s.Prev, m.s.Curr}}
}

type bucketT struct{ bucketM }

func (m *bucketT) refund(p Params, now, at, units int64) (back int64) {
	m.s, back = m.s.Refund(p, now, at, units)
	return back
}
func (m *bucketT) state() State {
	return State{Kind: KindTokenBucket, Small: Small{m.s.Taken, m.s.Last, m.s.LastFrac}}
}

type gcraT struct{ gcraM }

func (m *gcraT) refund(p Params, now, at, units int64) (back int64) {
	m.s, back = m.s.Refund(p, now, at, units)
	return back
}
func (m *gcraT) state() State { return State{Kind: KindGCRA, Small: Small{A: m.s.TAT, B: m.s.TATFrac}} }

type logT struct{ logM }

func (m *logT) refund(p Params, now, at, units int64) (back int64) {
	m.s, back = m.s.Refund(p, now, at, units)
	return back
}
func (m *logT) state() State { return State{Kind: KindSlidingWindowLog, Log: m.s.Log} }

type concT struct{ concM }

func (m *concT) refund(Params, int64, int64, int64) int64 { return 0 }
func (m *concT) state() State                             { return State{Kind: KindConcurrency, Units: m.s.Units} }
