package algorithm

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// gcraEdges are values near every bound of GCRA.Step's fast path: ticks
// (Burst*Period, tat - now) at and around maxTicks, one interval below
// and above a microsecond, fractions at 0, Limit-1, out of range, and
// the largest values Params may hold.
var (
	gcraEdgeLimits  = []int64{1, 2, 3, 7, 1000, 999_983, 1_000_000, 100_000_000, 1_000_000_000, MaxLimit - 1, MaxLimit}
	gcraEdgePeriods = []int64{1, 2, 3, 999, 1_000_000, 3_600_000_000, maxTicks / MaxLimit, maxTicks/MaxLimit + 1, 1 << 22, 1 << 30, MaxPeriod}
	gcraEdgeBursts  = []int64{0, 1, 2, 3, 1000, 40_000_000, MaxLimit - 1, MaxLimit}
	gcraEdgeNows    = []int64{0, 1, 1_764_633_600_000_000, MaxExact - MaxPeriod}
)

// gcraEdgeStates are states around now for p: the zero state, TAT just
// before, at and after now, and TAT around now + Burst*T and 2*Burst*T
// (one microsecond either side), each with fractions 0, 1, Limit/2,
// Limit-1, Limit and -1.
func gcraEdgeStates(p Params, now int64) []GCRA {
	// burstUS is floor(Burst*Period/Limit), in big numbers: it may not
	// fit in 64 bits.
	bt := new(big.Int).Mul(big.NewInt(p.Burst), big.NewInt(p.Period))
	burstUS := new(big.Int).Quo(bt, big.NewInt(p.Limit))
	offsets := []int64{-1, 0, 1, 2}
	for _, mul := range []int64{1, 2} {
		b := new(big.Int).Mul(burstUS, big.NewInt(mul))
		if !b.IsInt64() || b.Int64() > MaxExact {
			continue
		}
		for _, k := range []int64{-1, 0, 1} {
			offsets = append(offsets, b.Int64()+k)
		}
	}
	states := []GCRA{{}}
	for _, o := range offsets {
		for _, f := range []int64{0, 1, p.Limit / 2, p.Limit - 1, p.Limit, -1} {
			states = append(states, GCRA{TAT: now + o, TATFrac: f})
		}
	}
	return states
}

// TestGCRAFastIsExact checks that GCRA.Step, which counts in 64-bit ticks
// when they fit, answers as stepExact, the 128-bit arithmetic on instants,
// over every combination of edge values: the same new state and the same
// Decision.
func TestGCRAFastIsExact(t *testing.T) {
	t.Parallel()
	n := 0
	for _, l := range gcraEdgeLimits {
		for _, per := range gcraEdgePeriods {
			for _, b := range gcraEdgeBursts {
				p := Params{Limit: l, Period: per, Burst: b}
				costs := []int64{0, 1, 2, b - 1, b, b + 1, MaxLimit}
				for _, now := range gcraEdgeNows {
					for _, s := range gcraEdgeStates(p, now) {
						for _, cost := range costs {
							if cost < 0 {
								continue
							}
							n++
							if !sameGCRAStep(t, s, p, now, cost) {
								return
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestGCRAFastIsExactSequences runs random sequences of requests on one
// key through Step and through stepExact, each from its own state, under
// limits drawn from the edge values and at random, with the clock moving
// by steps below, around and above the emission interval (and now and
// then backwards), and checks both give every answer alike.
func TestGCRAFastIsExactSequences(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(31, 3))
	pick := func(xs []int64) int64 { return xs[rng.IntN(len(xs))] }
	for range 3000 {
		p := Params{Limit: pick(gcraEdgeLimits), Period: pick(gcraEdgePeriods), Burst: pick(gcraEdgeBursts)}
		if rng.IntN(2) == 0 {
			p = Params{Limit: 1 + rng.Int64N(1_000_000_000), Period: 1 + rng.Int64N(10_000_000), Burst: rng.Int64N(100_000)}
		}
		now := 1_764_633_600_000_000 + rng.Int64N(1_000_000)
		var fast, exact GCRA
		tUS := max(p.Period/p.Limit, 1)
		// A jump of up to twice the burst's duration, at most 2^40 µs.
		jump := tUS * 2
		if p.Burst < (1<<40)/jump {
			jump *= max(p.Burst, 1)
		}
		for range 60 {
			cost := rng.Int64N(4)
			switch rng.IntN(8) {
			case 0:
				cost = p.Burst
			case 1:
				cost = p.Burst + 1
			}
			f, df := fast.Step(p, now, cost)
			e, de := exact.stepExact(p, now, cost)
			if f != e || df != de {
				t.Fatalf("%+v now=%d cost=%d from %+v / %+v: Step gives %+v %+v, stepExact %+v %+v", p, now, cost, fast, exact, f, df, e, de)
			}
			fast, exact = f, e
			switch rng.IntN(6) {
			case 0:
				now -= rng.Int64N(2 * tUS)
			case 1:
				now += rng.Int64N(jump)
			default:
				now += rng.Int64N(2 * tUS)
			}
		}
	}
}

// FuzzGCRAFast compares Step with stepExact on any input, valid Params
// or not.
func FuzzGCRAFast(f *testing.F) {
	f.Add(int64(100_000_000), int64(1_000_000), int64(40_000_000), int64(1_764_633_600_000_000), int64(0), int64(5), int64(1))
	f.Add(MaxLimit, int64(1<<22), MaxLimit, MaxExact-MaxPeriod, int64(1<<22), int64(3), MaxLimit)
	f.Add(int64(3), int64(1_000_000), int64(2), int64(1_000), int64(1_000), int64(333_333), int64(2))
	f.Fuzz(func(t *testing.T, limit, period, burst, now, tat, frac, cost int64) {
		sameGCRAStep(t, GCRA{TAT: tat, TATFrac: frac}, Params{Limit: limit, Period: period, Burst: burst}, now, cost)
	})
}

// sameGCRAStep checks that Step, and StepTo into a Decision that held
// other values, answer as stepExact.
func sameGCRAStep(t *testing.T, s GCRA, p Params, now, cost int64) bool {
	t.Helper()
	f, df := s.Step(p, now, cost)
	e, de := s.stepExact(p, now, cost)
	if f != e || df != de {
		t.Errorf("%+v from %+v at now=%d cost=%d: Step gives %+v %+v, stepExact %+v %+v", p, s, now, cost, f, df, e, de)
		return false
	}
	sm := Small{A: s.TAT, B: s.TATFrac}
	dt := Decision{Allowed: !de.Allowed, Limit: -5, Remaining: -5, ResetAfter: -5, RetryAfter: -5}
	sm.StepTo(KindGCRA, &dt, p, now, cost)
	if sm != (Small{A: e.TAT, B: e.TATFrac}) || dt != de {
		t.Errorf("%+v from %+v at now=%d cost=%d: StepTo gives %+v %+v, stepExact %+v %+v", p, s, now, cost, sm, dt, e, de)
		return false
	}
	return true
}

// BenchmarkGCRAStep steps one key as a hot caller does, through Step and
// through stepExact in turn, blocks of 256 steps each, and reports the
// fastest block of each per step (fast-ns/step, exact-ns/step): on a
// loaded machine the fastest blocks are those no other process
// interrupted, and taking turns gives both the same machine. Limits: 1e8
// per second with a burst of 4e7 (bench/cmd/benchall's in-process rows),
// and 100 per second with a burst of 100 (mostly denied here); the clock
// moves one microsecond every 4 requests, so most steps find the bucket
// not full.
func BenchmarkGCRAStep(b *testing.B) {
	for _, p := range []Params{
		{Limit: 100_000_000, Period: 1_000_000, Burst: 40_000_000},
		{Limit: 100, Period: 1_000_000, Burst: 100},
	} {
		b.Run(fmt.Sprintf("limit=%d", p.Limit), func(b *testing.B) {
			const block = 256
			var fast, exact GCRA
			now := int64(1_764_633_600_000_000)
			best := [2]time.Duration{time.Hour, time.Hour}
			var d Decision
			for b.Loop() {
				for v := range 2 {
					t0 := time.Now()
					n := now
					for i := range block {
						if v == 0 {
							fast, d = fast.Step(p, n, 1)
						} else {
							exact, d = exact.stepExact(p, n, 1)
						}
						if i&3 == 3 {
							n++
						}
					}
					best[v] = min(best[v], time.Since(t0))
				}
				now += block / 4
			}
			sinkDecision = d
			b.ReportMetric(float64(best[0].Nanoseconds())/block, "fast-ns/step")
			b.ReportMetric(float64(best[1].Nanoseconds())/block, "exact-ns/step")
		})
	}
}

var sinkDecision Decision
