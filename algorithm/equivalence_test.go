package algorithm

import (
	"math/rand/v2"
	"testing"
)

// TestGCRAIsTokenBucket checks the claim of the package doc: on random
// sequences of requests, GCRA and TokenBucket with the same Params give the
// same Decision at every step.
func TestGCRAIsTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		limit := rng.Int64N(20) + 1
		period := rng.Int64N(3_000_000) + 1
		burst := rng.Int64N(30) + 1
		p := Params{Limit: limit, Period: period, Burst: burst}
		var tb TokenBucket
		var g GCRA
		now := rng.Int64N(1 << 40)
		for step := range 200 {
			now += rng.Int64N(period/limit*2 + 2)
			cost := rng.Int64N(burst + 2)
			var dt, dg Decision
			tb, dt = tb.Step(p, now, cost)
			g, dg = g.Step(p, now, cost)
			if dt != dg {
				t.Fatalf("params %+v step %d now %d cost %d: token bucket %+v, gcra %+v", p, step, now, cost, dt, dg)
			}
			if dt.Remaining < 0 || dt.Remaining > burst {
				t.Fatalf("remaining %d out of [0,%d]", dt.Remaining, burst)
			}
		}
	}
}
