package algorithm

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestRateCountIsExact checks rate.times and rate.count against big
// integers on random rates and instants crowded around multiples of T:
// times(n) is n*T exactly, and count(d, max) = min(max, floor(d/T)).
func TestRateCountIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	n := func(x int64) *big.Int { return big.NewInt(x) }
	for range 50_000 {
		limit := 1 + rng.Int64N(1<<rng.IntN(41))
		period := 1 + rng.Int64N(1<<rng.IntN(49))
		burst := rng.Int64N(1 << rng.IntN(41))
		// Keep the bounds Limit.Validate enforces: burst*limit and
		// burst*period/limit within range.
		if burst > 0 && (burst > MaxExact/limit || new(big.Int).Mul(n(burst), n(period)).Cmp(new(big.Int).Mul(n(MaxPeriod), n(limit))) > 0) {
			burst = 1
		}
		r := newRate(limit, period)
		k := rng.Int64N(burst + 1)
		at := r.times(k)
		// k*T = k*period/limit: us = floor, frac = remainder.
		q, m := new(big.Int).QuoRem(new(big.Int).Mul(n(k), n(period)), n(limit), new(big.Int))
		if at.us != q.Int64() || at.frac != m.Int64() {
			t.Fatalf("rate %d/%d: times(%d) = %+v, want {%v %v}", limit, period, k, at, q, m)
		}
		d := at
		switch rng.IntN(3) {
		case 0:
			d = r.sub(d, instant{frac: 1})
		case 1:
			d = r.add(d, instant{frac: 1})
		}
		if d.us < 0 {
			continue
		}
		// floor(d/T) = floor((us*limit + frac) / period)
		num := new(big.Int).Add(new(big.Int).Mul(n(d.us), n(limit)), n(d.frac))
		want := new(big.Int).Quo(num, n(period))
		if want.Cmp(n(burst)) > 0 {
			want = n(burst)
		}
		if got := r.count(d, burst); got != want.Int64() {
			t.Fatalf("rate %d/%d: count(%+v, %d) = %d, want %v", limit, period, d, burst, got, want)
		}
	}
	r := newRate(3, 1_000_000) // T = 333333 1/3 µs
	for _, c := range []struct {
		d         instant
		max, want int64
	}{
		{instant{us: -1}, 5, 0},
		{instant{us: 333333, frac: 0}, 5, 0},
		{instant{us: 333333, frac: 1}, 5, 1},
		{instant{us: 333333, frac: 1}, 1, 1},
		{instant{us: 999_999, frac: 2}, 5, 2},
		{instant{us: 1_000_000}, 5, 3},
		{instant{us: 1_000_000}, 1, 1},
		{instant{us: 1_000_000}, 0, 0},
		{instant{us: 1_000_000}, -1, 0},
	} {
		if got := r.count(c.d, c.max); got != c.want {
			t.Errorf("3/s: count(%+v, %d) = %d, want %d", c.d, c.max, got, c.want)
		}
	}
}
