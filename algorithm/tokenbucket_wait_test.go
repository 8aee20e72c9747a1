package algorithm

import (
	"math/rand/v2"
	"testing"
)

// TestTokenBucketWaitSteps is the table of a token bucket that waits
// (Params.Wait): 10 per second, burst 1, each wait allowed 3 units of
// debt (300 ms). A request that finds the bucket empty is admitted when
// the token it lacks comes within 300 ms, and the bucket stays empty
// until then; a plain request (Wait 0) queues behind the debt; a refund
// gives the debt back first, from the tail.
func TestTokenBucketWaitSteps(t *testing.T) {
	plain := Params{Limit: 10, Period: sec, Burst: 1}
	wait := plain
	wait.Wait = 3
	var s TokenBucket
	check := func(name string, p Params, now, cost int64, want Decision) {
		t.Helper()
		var d Decision
		s, d = s.Step(p, now, cost)
		if d != want {
			t.Fatalf("%s: %+v, want %+v (state %+v)", name, d, want, s)
		}
	}
	check("the one token", wait, t0, 1, allow(1, 0, 100*ms))
	// Empty: the next token comes at 100 ms, the one after at 200 ms...
	check("slot at 100 ms", wait, t0+10*ms, 1, allow(1, 0, 190*ms))
	check("slot at 200 ms", wait, t0+20*ms, 1, allow(1, 0, 280*ms))
	check("slot at 300 ms", wait, t0+30*ms, 1, allow(1, 0, 370*ms))
	if s != (TokenBucket{Taken: 1, Last: t0 + 300*ms}) {
		t.Fatalf("after three waits: %+v, want empty until 300 ms", s)
	}
	// The next slot, 400 ms, is 360 ms away: beyond 3 intervals. Denied,
	// retry when a wait of 300 ms reaches it: at 100 ms.
	check("slot at 400 ms is too far", wait, t0+40*ms, 1, deny(1, 0, 360*ms, 60*ms))
	// A plain request queues behind the debt: its token is the one of
	// 400 ms.
	check("plain behind the queue", plain, t0+50*ms, 1, deny(1, 0, 350*ms, 350*ms))
	check("slot at 400 ms at last", wait, t0+100*ms, 1, allow(1, 0, 400*ms))
	// A peek changes nothing and reads the debt: no token left, full
	// again in 350 ms. (It is allowed, as a peek at any empty bucket.)
	check("peek", plain, t0+150*ms, 0, allow(1, 0, 350*ms))

	// Refunds: the debt goes back first (3 units ahead of 150 ms: the
	// slots of 200, 300 and 400 ms), from the tail.
	var back int64
	s, back = s.Refund(plain, t0+150*ms, 0, 1)
	if back != 1 || s != (TokenBucket{Taken: 1, Last: t0 + 300*ms}) {
		t.Fatalf("refund 1: %d back, %+v", back, s)
	}
	s, back = s.Refund(plain, t0+150*ms, 0, 5)
	// 2 more owed (the slots of 200 and 300 ms), then the bucket is empty
	// from 100 ms and its one token not earned back by 150 ms: 1 more, and
	// it is full.
	if back != 3 || s != (TokenBucket{}) {
		t.Fatalf("refund 5: %d back, %+v; want 3 and a full bucket", back, s)
	}
}

// TestTokenBucketWaitIsGCRA checks, on random histories, that a token
// bucket that waits (Params.Wait = W) hands out the slots a GCRA with its
// burst raised by W hands out (floodgate.Limiter.Schedule's two ways of
// waiting), and that the two stay equivalent through plain requests and
// refunds: the same Allowed, ResetAfter and RetryAfter at every step, the
// same Remaining for plain steps, and as many units given back.
func TestTokenBucketWaitIsGCRA(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	debts := 0
	for round := range 3000 {
		p := Params{Limit: 1 + rng.Int64N(20), Period: (1 + rng.Int64N(3000)) * ms}
		p.Burst = 1 + rng.Int64N(2*p.Limit)
		var tb TokenBucket
		var g GCRA
		now := t0 + rng.Int64N(sec)
		for i := range 40 {
			now += rng.Int64N(p.Period/p.Limit*2 + 1)
			w := rng.Int64N(3 * p.Limit)
			pw, pg := p, p
			pw.Wait = w
			pg.Burst = p.Burst + w
			switch x := rng.IntN(4); {
			case x == 0: // a refund, as a hold's settle makes it (under the params it was reserved with)
				u := rng.Int64N(p.Burst + w + 1)
				var b1, b2 int64
				tb, b1 = tb.Refund(p, now, 0, u)
				g, b2 = g.Refund(pg, now, 0, u)
				if b1 != b2 {
					t.Fatalf("round %d step %d (%+v, refund %d of W %d): token bucket gave back %d, gcra %d", round, i, p, u, w, b1, b2)
				}
			case x == 1: // a plain request
				c := rng.Int64N(p.Burst + 1)
				var d1, d2 Decision
				tb, d1 = tb.Step(p, now, c)
				g, d2 = g.Step(p, now, c)
				if c == 0 && d1.Allowed && !d2.Allowed && d1.Remaining == 0 {
					// A peek at a bucket in debt: the token bucket has no
					// token to take and allows it (as it allows one whose
					// clock went back before its last credit), GCRA is
					// over its limit. They agree on the rest.
					d2.Allowed, d2.RetryAfter = true, 0
				}
				if d1 != d2 {
					t.Fatalf("round %d step %d (%+v, plain %d): token bucket %+v, gcra %+v", round, i, p, c, d1, d2)
				}
			default: // a request that waits
				c := 1 + rng.Int64N(p.Burst)
				var d1, d2 Decision
				before := tb
				tb, d1 = tb.Step(pw, now, c)
				g, d2 = g.Step(pg, now, c)
				if d1.Allowed != d2.Allowed || d1.ResetAfter != d2.ResetAfter || d1.RetryAfter != d2.RetryAfter || d1.Remaining != max(0, d2.Remaining-w) {
					t.Fatalf("round %d step %d (%+v, wait %d for %d, state %+v): token bucket %+v, gcra %+v", round, i, p, w, c, before, d1, d2)
				}
				if d1.Allowed && tb.Last > now {
					debts++
				}
			}
		}
	}
	if debts < 1000 {
		t.Errorf("only %d steps left the bucket in debt: the histories test little", debts)
	}
	t.Logf("%d steps left the bucket in debt", debts)
}
