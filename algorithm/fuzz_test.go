package algorithm_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// maxSteps bounds a fuzzed sequence. A step of a log or concurrency limit
// of 100000 units, with the probes of CheckStep, takes up to 0.1 s, so
// those get 4 steps.
const maxSteps = 32

// maxNow is the latest time floodgate.Request.Validate accepts, in µs.
const maxNow = algorithm.MaxExact - algorithm.MaxPeriod

// FuzzStep runs a sequence of requests, decoded from ops, under any limit
// that floodgate.Limit.Validate accepts, and checks that no step panics and
// that every Decision keeps the promises checkStep checks (Remaining within
// [0, Limit], RetryAfter brute-forced, ResetAfter == Expires - now, a
// denial changing nothing, no time past MaxExact).
//
// Each op is 3 bytes: how the clock moves, the cost, and the lease (ID and
// acquire or release) for concurrency; up to maxSteps ops.
func FuzzStep(f *testing.F) {
	type seed struct {
		alg                  floodgate.Algorithm
		limit, period, burst int64
		firstHit, countRej   bool
		start                int64
		ops                  []byte
	}
	seeds := []seed{
		{floodgate.FixedWindow, 3, 1_000_000, 0, false, false, 1_699_999_200_000_000, []byte{0, 1, 0, 1, 2, 0, 2, 1, 0, 3, 9, 0, 0, 2, 0}},
		{floodgate.FixedWindow, 3, 7, 0, true, true, 5, []byte{0, 4, 0, 1, 1, 0, 5, 2, 0, 2, 1, 0}},
		{floodgate.SlidingWindowLog, 3, 1_000_000, 0, false, false, 1_699_999_200_000_000, []byte{0, 1, 0, 1, 1, 0, 1, 1, 0, 6, 2, 0, 7, 3, 0}},
		{floodgate.SlidingWindow, 10, 1_000_000, 0, false, true, 1_699_999_200_000_000, []byte{0, 4, 0, 1, 9, 0, 2, 5, 0, 6, 1, 0}},
		{floodgate.SlidingWindow, 20, 10, 0, false, false, 100, []byte{0, 20, 0, 0, 1, 0, 1, 20, 0}},
		{floodgate.TokenBucket, 3, 1_000_000, 0, false, false, 1_699_999_200_000_000, []byte{0, 3, 0, 1, 1, 0, 2, 1, 0, 6, 2, 0}},
		{floodgate.GCRA, 1, 1_000_000, 2, false, false, 1_699_999_200_000_000, []byte{0, 2, 0, 3, 0, 0, 6, 1, 0}},
		{floodgate.GCRA, 4096, 256*4096 + 4095, 1 << 30, false, false, maxNow, []byte{0, 255, 0, 1, 255, 0}},
		{floodgate.Concurrency, 3, 10_000_000, 0, false, false, 1_699_999_200_000_000, []byte{0, 1, 0, 1, 2, 1, 2, 1, 2, 0, 2, 4, 5, 0, 1}},
		{floodgate.Concurrency, 2, 5, 0, false, false, maxNow, []byte{0, 2, 0, 6, 1, 1, 3, 0, 4}},
	}
	algs := floodgate.Algorithms
	for _, s := range seeds {
		i := 0
		for i < len(algs) && algs[i] != s.alg {
			i++
		}
		f.Add(uint8(i), s.limit, s.period, s.burst, s.firstHit, s.countRej, s.start, s.ops)
	}
	f.Fuzz(func(t *testing.T, alg uint8, limit, periodUS, burst int64, firstHit, countRejected bool, start int64, ops []byte) {
		l := floodgate.Limit{
			Algorithm:     algs[int(alg)%len(algs)],
			Limit:         limit,
			Period:        time.Duration(periodUS) * time.Microsecond,
			Burst:         burst,
			CountRejected: countRejected,
		}
		if periodUS > int64(floodgate.MaxPeriod/time.Microsecond) {
			return // the Duration overflows: not a period anyone can ask for
		}
		if firstHit {
			l.Window = floodgate.FirstHit
		}
		if l.Validate() != nil {
			return
		}
		runOps(t, []floodgate.Limit{l}, start, ops)
	})
}

// runOps decodes ops into requests under the limits ls (all of one
// algorithm and period, so they share state as in a store) and checks
// every step with CheckStep under the limit in force.
func runOps(t *testing.T, ls []floodgate.Limit, start int64, ops []byte) {
	t.Helper()
	m := algorithm.NewMachine(string(ls[0].Algorithm))
	now := min(max(start, 0), maxNow)
	ids := []string{"a", "b", "c"}
	steps := maxSteps
	for _, l := range ls {
		if (l.Algorithm == floodgate.SlidingWindowLog || l.Algorithm == floodgate.Concurrency) && l.Limit > 1000 {
			steps = 4 // each step and each probe is O(Limit)
		}
	}
	if len(ops) > 3*steps {
		ops = ops[:3*steps]
	}
	for len(ops) >= 3 {
		move, c, lease := ops[0], int64(ops[1]), ops[2]
		ops = ops[3:]
		l := ls[int(lease>>3)%len(ls)]
		p := l.Params()
		capacity := l.Capacity()
		switch n := int64(move >> 3); move & 7 {
		case 0: // the same instant
		case 1: // a few µs
			now += n
		case 2: // a fraction of the period
			now += p.Period * n / 31
		case 3: // to the next multiple of the period, or one before it
			now += p.Period - now%p.Period - n%2
		case 4: // backwards by a fraction of the period
			now -= p.Period * n / 31
		case 5: // backwards a few µs
			now -= n
		case 6: // a long idle spell
			now += p.Period * (n + 1)
		case 7: // to the end of time, or the start of it
			now = maxNow - n*p.Period
		}
		now = min(max(now, 0), maxNow)
		var cost int64
		switch {
		case c < 200:
			cost = c % (capacity + 2)
		case c < 220:
			cost = capacity
		case c < 240:
			cost = capacity + 1
		case c < 250:
			cost = capacity / 2
		default:
			cost = floodgate.MaxLimit
		}
		id, op := "", algorithm.LeaseAcquire
		if l.Algorithm == floodgate.Concurrency {
			id = ids[lease%3]
			if lease&4 != 0 {
				op = algorithm.LeaseRelease
			}
		}
		before := algorithm.CloneMachine(m)
		d := algorithm.StepMachine(m, p, now, cost, id, op)
		if d.ResetAfter > algorithm.MaxExact || d.RetryAfter > algorithm.MaxExact {
			t.Fatalf("params %+v now %d: %+v past MaxExact", p, now, d)
		}
		if d.Limit != capacity {
			t.Fatalf("%v: Decision.Limit %d, Capacity() %d", l, d.Limit, capacity)
		}
		algorithm.CheckStep(t, p, before, m, now, cost, id, op, d)
	}
}

// FuzzStepChangingLimit is FuzzStep with two limits that a store keeps in
// one state (same algorithm and period; Limit, Burst and options may
// differ), as when a config reload changes a limit: bit 3 of an op's lease
// byte picks the limit. Every step must keep the promises of the limit in
// force, whatever state the other left.
func FuzzStepChangingLimit(f *testing.F) {
	algs := floodgate.Algorithms
	f.Add(uint8(3), int64(1<<16), int64(1<<39), int64(1<<24), int64(1<<40), int64(1), uint8(0), int64(1_699_999_200_000_000),
		[]byte{0, 220, 0, 1, 1, 8, 2, 1, 8, 2, 10, 8})
	f.Add(uint8(4), int64(1<<16), int64(1<<39), int64(1<<24), int64(1<<40), int64(1), uint8(0), int64(1_699_999_200_000_000),
		[]byte{0, 220, 0, 1, 1, 8, 2, 1, 8, 2, 10, 8})
	f.Add(uint8(0), int64(10), int64(1_000_000), int64(0), int64(2), int64(0), uint8(2), int64(1_699_999_200_000_000),
		[]byte{0, 9, 0, 1, 200, 8, 1, 1, 8, 2, 1, 0})
	f.Add(uint8(1), int64(5), int64(1000), int64(0), int64(2), int64(0), uint8(0), int64(1_699_999_200_000_000),
		[]byte{0, 5, 0, 1, 1, 8, 1, 0, 8, 2, 2, 0})
	f.Add(uint8(2), int64(100), int64(1000), int64(0), int64(3), int64(0), uint8(1), int64(1_699_999_200_000_000),
		[]byte{0, 100, 0, 1, 1, 8, 9, 0, 8, 2, 2, 0})
	f.Add(uint8(5), int64(5), int64(1000), int64(0), int64(2), int64(0), uint8(0), int64(1_699_999_200_000_000),
		[]byte{0, 5, 0, 1, 1, 9, 1, 0, 10, 2, 2, 8})
	f.Fuzz(func(t *testing.T, alg uint8, limit1, periodUS, burst1, limit2, burst2 int64, options uint8, start int64, ops []byte) {
		if periodUS > int64(floodgate.MaxPeriod/time.Microsecond) {
			return
		}
		ls := []floodgate.Limit{
			{Algorithm: algs[int(alg)%len(algs)], Limit: limit1, Period: time.Duration(periodUS) * time.Microsecond, Burst: burst1},
			{Algorithm: algs[int(alg)%len(algs)], Limit: limit2, Period: time.Duration(periodUS) * time.Microsecond, Burst: burst2},
		}
		for i := range ls {
			if options>>(2*i)&1 != 0 {
				ls[i].Window = floodgate.FirstHit
			}
			ls[i].CountRejected = options>>(2*i+1)&1 != 0
			if ls[i].Validate() != nil {
				return
			}
		}
		runOps(t, ls, start, ops)
	})
}
