package algorithm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRefundEdges is the table of edge cases of docs/reservations.md:
// what a refund gives back when the window that counted the units has
// moved on, and when the bucket is already fuller than the refund.
func TestRefundEdges(t *testing.T) {
	p := Params{Limit: 10, Period: sec}
	bucket := Params{Limit: 10, Period: sec, Burst: 10}
	for _, tc := range []struct {
		name string
		run  func() int64 // the units given back
		want int64
	}{
		{"fixed window, same window", func() int64 {
			s, _ := FixedWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+500*ms, t0, 3)
			return back
		}, 3},
		{"fixed window, after the window ended", func() int64 {
			s, _ := FixedWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+sec, t0, 3)
			return back
		}, 0},
		{"fixed window, the new window counts other units", func() int64 {
			s, _ := FixedWindow{}.Step(p, t0, 4)
			s, _ = s.Step(p, t0+sec, 2)
			_, back := s.Refund(p, t0+sec+1, t0, 3)
			return back
		}, 0},
		{"fixed window, more than counted", func() int64 {
			s, _ := FixedWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0, t0, 9)
			return back
		}, 4},
		{"sliding window, current window", func() int64 {
			s, _ := SlidingWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+1, t0, 4)
			return back
		}, 4},
		{"sliding window, from the previous window's weight", func() int64 {
			s, _ := SlidingWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+sec+1, t0, 3)
			return back
		}, 3},
		{"sliding window, forgotten two windows on", func() int64 {
			s, _ := SlidingWindow{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+2*sec, t0, 3)
			return back
		}, 0},
		{"sliding window log, in the trailing period", func() int64 {
			s, _ := SlidingWindowLog{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+sec-1, t0, 3)
			return back
		}, 3},
		{"sliding window log, left the trailing period", func() int64 {
			s, _ := SlidingWindowLog{}.Step(p, t0, 4)
			_, back := s.Refund(p, t0+sec, t0, 3)
			return back
		}, 0},
		{"sliding window log, only the entries of that instant", func() int64 {
			s, _ := SlidingWindowLog{}.Step(p, t0, 2)
			s, _ = s.Step(p, t0+1, 5)
			_, back := s.Refund(p, t0+2, t0, 4)
			return back
		}, 2},
		{"token bucket, refilled since", func() int64 {
			s, _ := TokenBucket{}.Step(bucket, t0, 6)
			_, back := s.Refund(bucket, t0+300*ms, t0, 6) // 3 tokens came back by themselves
			return back
		}, 3},
		{"token bucket, full again", func() int64 {
			s, _ := TokenBucket{}.Step(bucket, t0, 6)
			_, back := s.Refund(bucket, t0+sec, t0, 6)
			return back
		}, 0},
		{"gcra, refilled since", func() int64 {
			s, _ := GCRA{}.Step(bucket, t0, 6)
			_, back := s.Refund(bucket, t0+300*ms, t0, 6)
			return back
		}, 3},
		{"gcra, partway through a token", func() int64 {
			s, _ := GCRA{}.Step(bucket, t0, 6)
			_, back := s.Refund(bucket, t0+250*ms, t0, 6) // 2.5 tokens earned: 4 whole ones missing
			return back
		}, 4},
	} {
		if got := tc.run(); got != tc.want {
			t.Errorf("%s: gave back %d, want %d", tc.name, got, tc.want)
		}
	}
}

// reserverCase drives Reserve and Settle for one algorithm through the
// machine face of the other tests.
type reserverCase struct {
	name    string
	p       Params
	machine func() machine
	// reserve and settle apply the generic functions to the machine's state.
	reserve func(m machine, now, units, ttl int64, release bool) (Hold, Decision)
	settle  func(m machine, h Hold, now, actual int64, cancel bool) (Hold, Settlement, SettleCode)
}

func reserverFor[S Reserver[S]](name string, p Params, newM func() machine, get func(machine) *S) reserverCase {
	return reserverCase{
		name: name, p: p, machine: newM,
		reserve: func(m machine, now, units, ttl int64, release bool) (Hold, Decision) {
			s := get(m)
			var h Hold
			var d Decision
			*s, h, d = Reserve(*s, p, now, units, ttl, release)
			return h, d
		},
		settle: func(m machine, h Hold, now, actual int64, cancel bool) (Hold, Settlement, SettleCode) {
			s := get(m)
			var st Settlement
			var code SettleCode
			*s, h, st, code, _ = Settle(*s, h, p, now, actual, cancel)
			return h, st, code
		},
	}
}

func reserverCases() []reserverCase {
	p := Params{Limit: 10, Period: sec}
	b := Params{Limit: 10, Period: sec, Burst: 15}
	return []reserverCase{
		reserverFor("fixed_window", p, func() machine { return &fixedM{} }, func(m machine) *FixedWindow { return &m.(*fixedM).s }),
		reserverFor("fixed_window/first_hit", Params{Limit: 10, Period: sec, FirstHit: true}, func() machine { return &fixedM{} }, func(m machine) *FixedWindow { return &m.(*fixedM).s }),
		reserverFor("sliding_window_log", p, func() machine { return &logM{} }, func(m machine) *SlidingWindowLog { return &m.(*logM).s }),
		reserverFor("sliding_window", p, func() machine { return &slidingM{} }, func(m machine) *SlidingWindow { return &m.(*slidingM).s }),
		reserverFor("token_bucket", b, func() machine { return &bucketM{} }, func(m machine) *TokenBucket { return &m.(*bucketM).s }),
		reserverFor("gcra", b, func() machine { return &gcraM{} }, func(m machine) *GCRA { return &m.(*gcraM).s }),
	}
}

// probe is the decisions a series of requests after now would get from m
// (on a copy): two states that answer every probe alike are the same to
// every caller.
func probe(m machine, p Params, now int64) []Decision {
	c := m.clone()
	var ds []Decision
	for i, at := range []int64{0, 1, 100 * ms, 400 * ms, 999 * ms, sec, 1500 * ms, 2 * sec, 3 * sec} {
		ds = append(ds, c.step(p, now+at, int64(i%3), "", 0))
	}
	return ds
}

// TestReserveThenCommit checks the rule every algorithm's reservations
// follow, on random histories: reserving n and committing a <= n at the
// same instant leaves the state a plain request of cost a leaves; a
// cancel leaves the state no request leaves.
func TestReserveThenCommit(t *testing.T) {
	for _, rc := range reserverCases() {
		t.Run(rc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(rc.name))))
			for round := range 2000 {
				m := rc.machine()
				now := t0
				for range rng.IntN(8) {
					now += rng.Int64N(700 * ms)
					m.step(rc.p, now, rng.Int64N(5), "", 0)
				}
				now += rng.Int64N(300 * ms)
				units := 1 + rng.Int64N(6)
				actual := rng.Int64N(units + 1)
				cancel := rng.IntN(4) == 0
				if cancel {
					actual = 0
				}
				plain := m.clone()
				plain.step(rc.p, now, actual, "", 0)
				held := m.clone()
				h, d := rc.reserve(held, now, units, sec, false)
				if !d.Allowed {
					continue
				}
				if _, st, code := rc.settle(held, h, now, actual, cancel); code != Settled || st.Refunded != units-actual {
					t.Fatalf("round %d: settle %d of %d: %+v, code %d; want %d given back", round, actual, units, st, code, units-actual)
				}
				if got, want := probe(held, rc.p, now), probe(plain, rc.p, now); !slices.Equal(got, want) {
					t.Fatalf("round %d: reserve %d, commit %d (cancel %v) at %d\n got %v\nwant %v", round, units, actual, cancel, now-t0, got, want)
				}
			}
		})
	}
}

// TestSettleOnce: a hold is settled once. A retry of the same step gets the
// first answer and changes nothing; another step is a conflict; a step
// after the expiry is too late, and the expiry charged the units (or gave
// them back with Release) once; an excess is taken when the limit admits
// it and reported short when not.
func TestSettleOnce(t *testing.T) {
	for _, rc := range reserverCases() {
		t.Run(rc.name, func(t *testing.T) {
			capacity := rc.p.Limit
			if rc.p.Burst > 0 {
				capacity = rc.p.Burst
			}
			m := rc.machine()
			h, d := rc.reserve(m, t0, 4, 100*ms, false)
			if !d.Allowed || h.State != Held || d.Remaining != capacity-4 {
				t.Fatalf("reserve 4: %+v %+v", h, d)
			}
			h, st, code := rc.settle(m, h, t0+ms, 1, false)
			if code != Settled || st.Refunded != 3 || h.State != Committed {
				t.Fatalf("commit 1: %+v %+v %d", h, st, code)
			}
			before := probe(m, rc.p, t0+2*ms)
			for _, retry := range []struct {
				actual int64
				cancel bool
				want   SettleCode
			}{{1, false, Replayed}, {2, false, Conflict}, {0, true, Conflict}} {
				h2, st2, code := rc.settle(m, h, t0+2*ms, retry.actual, retry.cancel)
				if code != retry.want || st2 != st || h2 != h {
					t.Errorf("settle %d (cancel %v) again: %+v %d, want code %d and the first answer", retry.actual, retry.cancel, st2, code, retry.want)
				}
			}
			if after := probe(m, rc.p, t0+2*ms); !slices.Equal(before, after) {
				t.Errorf("a retried settle changed the state:\n%v\n%v", before, after)
			}

			// Expiry: charged by default, given back with Release, once.
			for _, release := range []bool{false, true} {
				m := rc.machine()
				h, _ := rc.reserve(m, t0, 4, 100*ms, release)
				h, st, code := rc.settle(m, h, t0+100*ms, 4, false)
				wantBack := int64(0)
				switch {
				case release && rc.p.Burst > 0:
					wantBack = 3 // a bucket of 10 per second earned one back in the 100 ms
				case release:
					wantBack = 4
				}
				if code != TooLate || h.State != Expired || st.Refunded != wantBack {
					t.Errorf("commit at expiry (release %v): %+v %+v %d, want too late with %d given back", release, h, st, code, wantBack)
				}
				if _, st2, code := rc.settle(m, h, t0+101*ms, 0, true); code != TooLate || st2 != st {
					t.Errorf("cancel after expiry (release %v): %+v %d, want too late and the expiry's answer", release, st2, code)
				}
			}

			// Excess: taken while the limit admits it, short when not.
			m = rc.machine()
			h, _ = rc.reserve(m, t0, 2, sec, false)
			if _, st, _ := rc.settle(m, h, t0, 5, false); st.Charged != 3 || st.Short != 0 {
				t.Errorf("commit 5 of 2 with room: %+v, want 3 charged", st)
			}
			m = rc.machine()
			h, _ = rc.reserve(m, t0, 2, sec, false)
			m.step(rc.p, t0, capacity-2, "", 0)
			if _, st, _ := rc.settle(m, h, t0, 5, false); st.Charged != 0 || st.Short != 3 {
				t.Errorf("commit 5 of 2 without room: %+v, want 3 short", st)
			}

			// A denied reservation holds nothing and cannot be settled.
			h, d = rc.reserve(rc.machine(), t0, capacity+1, sec, false)
			if d.Allowed || h.State != Denied {
				t.Errorf("reserve above capacity: %+v %+v", h, d)
			}
			if _, _, code := rc.settle(rc.machine(), h, t0, 0, true); code != Conflict {
				t.Errorf("cancel of a denied reservation: code %d, want conflict", code)
			}
		})
	}
}

// TestRefundGCRAMatchesTokenBucket: GCRA and TokenBucket stay equivalent
// through refunds, on random histories of requests and refunds.
func TestRefundGCRAMatchesTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 3000 {
		p := Params{Limit: 1 + rng.Int64N(20), Period: (1 + rng.Int64N(3000)) * ms}
		p.Burst = 1 + rng.Int64N(2*p.Limit)
		var tb TokenBucket
		var g GCRA
		now := t0
		for i := range 20 {
			now += rng.Int64N(p.Period)
			var b1, b2 int64
			if rng.IntN(3) == 0 {
				u := rng.Int64N(p.Burst + 1)
				tb, b1 = tb.Refund(p, now, 0, u)
				g, b2 = g.Refund(p, now, 0, u)
			} else {
				c := rng.Int64N(p.Burst + 1)
				var d1, d2 Decision
				tb, d1 = tb.Step(p, now, c)
				g, d2 = g.Step(p, now, c)
				if d1 != d2 {
					t.Fatalf("round %d, step %d: token bucket %+v, gcra %+v", round, i, d1, d2)
				}
			}
			if b1 != b2 {
				t.Fatalf("round %d, step %d (%s): token bucket gave back %d, gcra %d", round, i, fmt.Sprint(p), b1, b2)
			}
		}
	}
}
