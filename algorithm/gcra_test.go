package algorithm

import (
	"math/big"
	"testing"
)

// TestGCRASteps runs the token bucket's step tables on GCRA, which the
// package doc says answers the same while the clock does not go backwards,
// and shows where they part when it does.
func TestGCRASteps(t *testing.T) {
	for _, tc := range bucketTables {
		t.Run(tc.name, func(t *testing.T) {
			run(t, tc.p, &gcraM{}, tc.steps)
		})
	}
	t.Run("clock going backwards", func(t *testing.T) {
		// The same steps as the token bucket's: from its one instant
		// (TAT = t0+2s) GCRA counts the token the bucket credited at t0+1s
		// as not earned yet at t0+500ms, so it is the stricter.
		run(t, Params{Limit: 1, Period: sec, Burst: 2}, &gcraM{}, []step{
			{at: t0, cost: 2, want: allow(2, 0, 2*sec)},
			{at: t0 + sec, cost: 0, want: allow(2, 1, sec)},
			{at: t0 + 500*ms, cost: 1, want: deny(2, 0, 1500*ms, 500*ms)},
			{at: t0 + sec, cost: 1, want: allow(2, 0, 2*sec)},
		})
	})
	t.Run("clock going backwards on a full bucket", func(t *testing.T) {
		run(t, Params{Limit: 1, Period: sec, Burst: 1}, &gcraM{}, []step{
			{at: t0 + 2*sec, cost: 0, want: allow(1, 1, 0)},
			{at: t0 + sec, cost: 1, want: allow(1, 0, sec)},
			{at: t0 + 2*sec, cost: 1, want: allow(1, 0, sec)},
		})
	})
}

// gcraModel is GCRA with the theoretical arrival time as an exact big.Rat
// and the emission interval T = Period/Limit: a request is admitted if
// max(TAT, now) + cost*T - Burst*T <= now. RetryAfter is found by search.
type gcraModel struct {
	p   Params
	tat *big.Rat
}

func (g *gcraModel) interval(n int64) *big.Rat { return big.NewRat(n*g.p.Period, g.p.Limit) }

// from is max(TAT, t).
func (g *gcraModel) from(t int64) *big.Rat {
	at := new(big.Rat).SetInt64(t)
	if g.tat != nil && g.tat.Cmp(at) > 0 {
		at.Set(g.tat)
	}
	return at
}

// allowAt is the first instant a request of cost fits.
func (g *gcraModel) allowAt(t, cost int64) *big.Rat {
	at := g.from(t)
	at.Add(at, g.interval(cost))
	return at.Sub(at, g.interval(g.p.Burst))
}

func (g *gcraModel) admits(t, cost int64) bool {
	return cost <= g.p.Burst && g.allowAt(t, cost).Cmp(new(big.Rat).SetInt64(t)) <= 0
}

func (g *gcraModel) step(now, cost int64, _ string, _ LeaseOp) Decision {
	if g.p.Limit == 0 {
		g.tat = nil
		if cost > 0 {
			return Decision{RetryAfter: Never}
		}
		return Decision{Allowed: true}
	}
	allowed := g.admits(now, cost)
	tat := g.from(now)
	if allowed {
		tat.Add(tat, g.interval(cost))
	}
	nowR := new(big.Rat).SetInt64(now)
	g.tat = tat
	if tat.Cmp(nowR) <= 0 {
		g.tat = nil // a TAT at or before now is a full bucket: forgotten
	}
	d := Decision{Allowed: allowed, Limit: g.p.Burst}
	// Tokens left: (Burst*T - (TAT - now)) / T, floored, at least 0.
	left := new(big.Rat).Sub(g.interval(g.p.Burst), new(big.Rat).Sub(tat, nowR))
	if left.Sign() > 0 {
		left.Quo(left, g.interval(1))
		d.Remaining = new(big.Int).Quo(left.Num(), left.Denom()).Int64()
	}
	if tat.Cmp(nowR) > 0 {
		ceil := new(big.Int).Quo(tat.Num(), tat.Denom())
		if !tat.IsInt() {
			ceil.Add(ceil, big.NewInt(1))
		}
		d.ResetAfter = ceil.Int64() - now
	}
	switch {
	case allowed:
	case cost > g.p.Burst:
		d.RetryAfter = Never
	default:
		d.RetryAfter = firstTrue(now+1, now+d.ResetAfter, func(t int64) bool { return g.admits(t, cost) }) - now
	}
	return d
}

func TestGCRAModel(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{false, true} {
		differential(t, 9, 100, 150, bucketParams, func() machine { return &gcraM{} }, func(p Params) model { return &gcraModel{p: p} }, back)
	}
}

func TestGCRAAdmits(t *testing.T) {
	t.Parallel()
	for _, tr := range traces(t, 10, 400, 200, bucketParams, func() machine { return &gcraM{} }, false) {
		checkBucketAdmits(t, tr)
	}
}
