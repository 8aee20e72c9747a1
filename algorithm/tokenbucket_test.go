package algorithm

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// bucketTables are step tables for TokenBucket, written from the package
// doc. GCRA must answer each step the same (TestGCRASteps runs them too):
// none of them moves the clock backwards.
var bucketTables = []struct {
	name  string
	p     Params
	steps []step
}{
	{"3 per second: one token every 333333 1/3 µs", Params{Limit: 3, Period: sec, Burst: 3}, []step{
		{at: t0, cost: 3, want: allow(3, 0, sec)},
		// The first token is back at t0 + 333333 1/3 µs: rounded up.
		{at: t0, cost: 1, want: deny(3, 0, sec, 333_334)},
		{at: t0 + 333_333, cost: 1, want: deny(3, 0, 666_667, 1)},
		// Full again at t0 + 1333333 1/3: ResetAfter rounds up too.
		{at: t0 + 333_334, cost: 1, want: allow(3, 0, sec)},
		{at: t0 + 666_667, cost: 1, want: allow(3, 0, sec)},
		// No drift: the third token is credited at exactly t0 + 1 s.
		{at: t0 + sec - 1, cost: 1, want: deny(3, 0, 666_668, 1)},
		{at: t0 + sec, cost: 1, want: allow(3, 0, sec)},
		// A second later the bucket is full: the zero state.
		{at: t0 + 2*sec, cost: 0, want: allow(3, 3, 0)},
		{at: t0 + 2*sec, cost: 4, want: deny(3, 3, 0, Never)},
		{at: t0 + 2*sec, cost: 2, want: allow(3, 1, 666_667)},
		// One token back at t0 + 2333333 1/3, the next at 2666666 2/3.
		{at: t0 + 2500*ms, cost: 3, want: deny(3, 2, 166_667, 166_667)},
		{at: t0 + 2*sec + 666_667, cost: 3, want: allow(3, 0, sec)},
	}},
	// The package doc's example of the default burst.
	{"10 per second: 10 at once, then one every 100 ms", Params{Limit: 10, Period: sec, Burst: 10}, []step{
		{at: t0, cost: 10, want: allow(10, 0, sec)},
		{at: t0 + 50*ms, cost: 1, want: deny(10, 0, 950*ms, 50*ms)},
		{at: t0 + 100*ms, cost: 1, want: allow(10, 0, sec)},
		{at: t0 + 200*ms, cost: 1, want: allow(10, 0, sec)},
		{at: t0 + 250*ms, cost: 2, want: deny(10, 0, 950*ms, 150*ms)},
	}},
	{"burst above limit", Params{Limit: 1, Period: sec, Burst: 3}, []step{
		{at: t0, cost: 3, want: allow(3, 0, 3*sec)},
		{at: t0 + 500*ms, cost: 1, want: deny(3, 0, 2500*ms, 500*ms)},
		{at: t0 + 500*ms, cost: 3, want: deny(3, 0, 2500*ms, 2500*ms)},
		{at: t0 + sec, cost: 1, want: allow(3, 0, 3*sec)},
		{at: t0 + 3500*ms, cost: 0, want: allow(3, 2, 500*ms)},
	}},
	{"burst below limit", Params{Limit: 10, Period: sec, Burst: 2}, []step{
		{at: t0, cost: 2, want: allow(2, 0, 200*ms)},
		{at: t0, cost: 3, want: deny(2, 0, 200*ms, Never)},
		{at: t0 + 150*ms, cost: 2, want: deny(2, 1, 50*ms, 50*ms)},
		// An idle spell refills up to Burst, not beyond.
		{at: t0 + 10*sec, cost: 0, want: allow(2, 2, 0)},
		{at: t0 + 10*sec, cost: 2, want: allow(2, 0, 200*ms)},
	}},
	{"peek", Params{Limit: 2, Period: sec, Burst: 2}, []step{
		{at: t0, cost: 0, want: allow(2, 2, 0)},
		{at: t0, cost: 2, want: allow(2, 0, sec)},
		{at: t0 + 400*ms, cost: 0, want: allow(2, 0, 600*ms)},
		{at: t0 + 500*ms, cost: 0, want: allow(2, 1, 500*ms)},
	}},
	{"limit 0", Params{Limit: 0, Period: sec, Burst: 5}, []step{
		{at: t0, cost: 1, want: deny(0, 0, 0, Never)},
		{at: t0, cost: 0, want: allow(0, 0, 0)},
	}},
}

func TestTokenBucketSteps(t *testing.T) {
	for _, tc := range bucketTables {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &bucketM{}, tc.steps)
		})
	}
	t.Run("clock going backwards", func(t *testing.T) {
		run(t, Params{Limit: 1, Period: sec, Burst: 2}, &bucketM{}, []step{
			{at: t0, cost: 2, want: allow(2, 0, 2*sec)},
			{at: t0 + sec, cost: 0, want: allow(2, 1, sec)},
			// Before the token credited at t0+1s: the bucket keeps it.
			{at: t0 + 500*ms, cost: 1, want: allow(2, 0, 2500*ms)},
			{at: t0 + 500*ms, cost: 1, want: deny(2, 0, 2500*ms, 1500*ms)},
		})
	})
	t.Run("clock going backwards on a full bucket", func(t *testing.T) {
		run(t, Params{Limit: 1, Period: sec, Burst: 1}, &bucketM{}, []step{
			{at: t0 + 2*sec, cost: 0, want: allow(1, 1, 0)},
			// A full bucket is the zero state: it remembers no time, so the
			// refill starts from the earlier now.
			{at: t0 + sec, cost: 1, want: allow(1, 0, sec)},
			{at: t0 + 2*sec, cost: 1, want: allow(1, 0, sec)},
		})
	})
}

// TestTokenBucketBurstLowered is the regression test of an int64 overflow
// when a store's state, kept under one limit, is read under another with a
// smaller Burst (stores share state between limits that differ only in
// Limit, Burst or options). Taken = 2^24 from the old limit times the new
// interval's remainder r = 2^39 µs wrapped to a negative ResetAfter. Taken
// is now read as at most Burst: an empty bucket.
func TestTokenBucketBurstLowered(t *testing.T) {
	old := Params{Limit: 1 << 16, Period: 1 << 39, Burst: 1 << 24}
	p := Params{Limit: 1 << 40, Period: 1 << 39, Burst: 31} // T = 1/2 µs
	run(t, old, &bucketM{}, []step{{at: t0, cost: 1 << 24, want: allow(1<<24, 0, 1<<47)}})
	m := &bucketM{}
	m.s, _ = m.s.Step(old, t0, 1<<24)
	run(t, p, m, []step{
		// 31 tokens missing: full in 15.5 µs, 15 tokens back in 7.5 µs.
		{at: t0, cost: 15, want: deny(31, 0, 16, 8)},
		// 16 tokens back by t0+8, 15 taken: 30 missing again.
		{at: t0 + 8, cost: 15, want: allow(31, 1, 15)},
	})
}

// bucketModel is a token bucket with continuous rational tokens: x tokens
// at the instant last, gaining Limit/Period per µs up to Burst. Remaining is
// the floor of x; ResetAfter and RetryAfter are found by search.
type bucketModel struct {
	p    Params
	x    *big.Rat // nil: a full bucket
	last int64
}

// tokens is the bucket at t, if nothing is taken before.
func (b *bucketModel) tokens(t int64) *big.Rat {
	burst := new(big.Rat).SetInt64(b.p.Burst)
	if b.x == nil {
		return burst
	}
	x := new(big.Rat).Set(b.x)
	if t > b.last {
		x.Add(x, big.NewRat((t-b.last)*b.p.Limit, b.p.Period))
	}
	if x.Cmp(burst) > 0 {
		return burst
	}
	return x
}

func (b *bucketModel) step(now, cost int64, _ string, _ LeaseOp) Decision {
	if b.p.Limit == 0 {
		b.x = nil
		if cost > 0 {
			return Decision{RetryAfter: Never}
		}
		return Decision{Allowed: true}
	}
	burst := new(big.Rat).SetInt64(b.p.Burst)
	x := b.tokens(now)
	if now > b.last || x.Cmp(burst) == 0 {
		b.last = now
	}
	c := new(big.Rat).SetInt64(cost)
	allowed := x.Cmp(c) >= 0
	if allowed {
		x.Sub(x, c)
	}
	b.x = x
	d := Decision{Allowed: allowed, Limit: b.p.Burst, Remaining: new(big.Int).Quo(x.Num(), x.Denom()).Int64()}
	if x.Cmp(burst) < 0 {
		d.ResetAfter = firstTrue(now+1, now+b.p.Burst*b.p.Period+b.last-min(b.last, now), func(t int64) bool {
			return b.tokens(t).Cmp(burst) == 0
		}) - now
	} else {
		b.x = nil
	}
	switch {
	case allowed:
	case cost > b.p.Burst:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return b.tokens(t).Cmp(c) >= 0 }) - now
	}
	return d
}

func bucketParams(rng *rand.Rand) Params {
	p := Params{Limit: rng.Int64N(7), Period: randomPeriod(rng), Burst: rng.Int64N(8) + 1}
	if rng.IntN(4) == 0 {
		p.Burst = p.Limit // the default
	}
	return p
}

func TestTokenBucketModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 7, 100, 150, bucketParams, func() machine { return &bucketM{} }, func(p Params) model { return &bucketModel{p: p} }, back)
	}
}

// checkBucketAdmits checks on a sequence whose clock never goes backwards
// that no span of time [a, b] admits more than Burst + (b-a)*Limit/Period
// units.
func checkBucketAdmits(t *testing.T, tr trace) {
	t.Helper()
	p := tr.p
	// sum[i] is the cost admitted by the first i steps.
	sum := make([]int64, len(tr.evs)+1)
	for i, ev := range tr.evs {
		sum[i+1] = sum[i]
		if ev.d.Allowed {
			sum[i+1] += ev.cost
		}
	}
	for i, a := range tr.evs {
		for j := i; j < len(tr.evs); j++ {
			b := tr.evs[j]
			if n, most := sum[j+1]-sum[i], p.Burst+(b.now-a.now)*p.Limit/p.Period; n > most {
				t.Fatalf("params %+v: %d units admitted in [%d, %d], more than %d", p, n, a.now, b.now, most)
			}
		}
	}
}

func TestTokenBucketAdmits(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 8, 400, 200, bucketParams, func() machine { return &bucketM{} }, false) {
		checkBucketAdmits(t, tr)
	}
}
