package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// checkArrivalCurve checks the merged admissions against the limit's
// arrival curve, exactly: for every pair of admissions i <= j in time
// order, the units admitted from i to j (both included) are at most
// Capacity + Limit × (t_j − t_i) / Period. It computes, for each j, the
// largest left-hand side over every i at once (a running maximum), so
// every pair is checked in one pass; all in integers, scaled by Period.
func checkArrivalCurve(t *testing.T, l floodgate.Limit, got []admission) {
	t.Helper()
	sort.SliceStable(got, func(i, j int) bool { return got[i].now.Before(got[j].now) })
	period := l.Period.Microseconds()
	// With S_j the units of admissions 0..j: S_j − S_{i−1} ≤ B + L(t_j − t_i)/P
	// ⟺ (S_j·P − L·t_j) + max_{i≤j}(L·t_i − S_{i−1}·P) ≤ B·P.
	var sum int64
	best := int64(-1 << 62)
	bestAt := 0
	for j, a := range got {
		tj := a.now.Sub(t0).Microseconds()
		if v := l.Limit*tj - sum*period; v > best {
			best, bestAt = v, j
		}
		sum += a.cost
		if lhs := sum*period - l.Limit*tj + best; lhs > l.Capacity()*period {
			var units int64
			for _, b := range got[bestAt : j+1] {
				units += b.cost
			}
			t.Fatalf("%v: admissions %d to %d (%v to %v) took %d units, above the arrival curve's %d + %d × %v / %v",
				l, bestAt, j, got[bestAt].now.Sub(t0), a.now.Sub(t0), units, l.Capacity(), l.Limit, a.now.Sub(got[bestAt].now), l.Period)
		}
	}
}

// lagHome is a grant.Home whose calls take time on the simulation's
// clock: it moves the clock before and after each call, as a round trip
// would (up to 2 ms each way, and one call in eight up to 60 ms),
// so that decisions racing a grant call see time pass during it.
type lagHome struct {
	grant.Home
	clock *paceClock
	check func() // called at each move of the clock, if set
	mu    sync.Mutex
	rng   *rand.Rand
}

func (h *lagHome) Grant(ctx context.Context, r grant.Request) (grant.Grant, error) {
	h.lag()
	defer h.lag()
	return h.Home.Grant(ctx, r)
}

func (h *lagHome) lag() {
	if h.check != nil {
		h.check()
	}
	h.mu.Lock()
	d := time.Duration(h.rng.IntN(2000)) * time.Microsecond
	if h.rng.IntN(8) == 0 {
		d = time.Duration(h.rng.IntN(60_000)) * time.Microsecond // a slow round trip
	}
	h.mu.Unlock()
	h.clock.Advance(d)
}

// A paceClock is the simulation's clock: a FakeClock that also moves
// with real time, so that over any stretch it runs at least as fast as
// real time. Redis expires the grants' and marks' keys in real time, a
// TTL after the call that set them, the TTL being the span left on this
// clock; a clock that ran slower than real time after a call (a step of
// the simulation that took 300 ms on a loaded machine running the race
// detector, while the fake clock moved 10 ms) would see Redis forget a
// grant still live on it, as a Redis that lost its data would, and home
// hand its share out again: an overrun of the test, not of the store.
// (Keeping the clock ahead of real time since the start, as a pacer
// does, is not enough: the clock may be seconds ahead and still run
// slower than real time across one grant's 220 ms.) Running at least as
// fast, it sees every key outlive the span it gave it.
type paceClock struct {
	fake *floodgatetest.FakeClock
	real time.Time
}

func newPaceClock(t time.Time) *paceClock {
	return &paceClock{fake: floodgatetest.NewFakeClock(t), real: time.Now()}
}

// Now is the fake clock's time plus the real time since the start, in
// whole microseconds, as the fake clock's steps are: an instance's bucket
// time (rateSlices.micros, from its start) and the Decision.Now it
// reports (the time's own microsecond) then agree, as they did on the
// fake clock alone. With nanoseconds they could differ by 1 µs, and the
// arrival curve, checked on the reported times, once found 350 units in
// 1.099999 s of a limit that allows 20 + 300/s.
func (c *paceClock) Now() time.Time {
	return c.fake.Now().Add(time.Since(c.real).Truncate(time.Microsecond))
}

// Advance moves the clock forward by d, on top of real time.
func (c *paceClock) Advance(d time.Duration) { c.fake.Advance(d) }

// A pacer keeps a fake clock at least as far along as real time since
// the start: Redis expires the grants' and marks' keys in real time, after
// the spans the fake clock gave them, so a fake clock that fell behind
// real time (a loaded machine running the race detector) would see Redis
// forget grants still live on it, as a Redis that lost its data would.
// That holds only where the clock does not stand still for long while
// a key it gave a span to lives (TestSliceSparseKey moves it by tens of
// seconds between short bursts); elsewhere use a paceClock.
type pacer struct {
	clock       *floodgatetest.FakeClock
	fake0, real time.Time
}

func newPacer(clock *floodgatetest.FakeClock) pacer {
	return pacer{clock: clock, fake0: clock.Now(), real: time.Now()}
}

// keepAhead moves the clock forward by as much as it is behind.
func (p pacer) keepAhead() {
	if behind := time.Since(p.real) - p.clock.Now().Sub(p.fake0); behind > 0 {
		p.clock.Advance(behind)
	}
}

// sliceInstances returns n stores on one Redis sharing the clock, each
// grant call of which moves the clock (lagHome).
func sliceInstances(t *testing.T, addr string, n int, clock *paceClock, seed uint64) []*Store {
	t.Helper()
	stores := newInstances(t, addr, n, Options{Prefix: testPrefix(t), Clock: clock,
		SliceRenew: 50 * time.Millisecond, SliceTerm: 200 * time.Millisecond, SliceGrace: 20 * time.Millisecond})
	for i, s := range stores {
		s.slices.home = &lagHome{Home: s.slices.home, clock: clock, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
	}
	return stores
}

// checkSlices checks, on a snapshot of every instance's slices taken with
// all their locks held, the invariant the zero overrun rests on: the live
// slices of each key add up to at most its Limit, their bursts to at
// most its Capacity, and no bucket holds more than its burst.
func checkSlices(t *testing.T, stores []*Store, clock *paceClock) {
	for _, s := range stores {
		for i := range s.slices.shards.parts {
			s.slices.shards.parts[i].mu.Lock()
			defer s.slices.shards.parts[i].mu.Unlock()
		}
	}
	now := clock.Now()
	type sums struct {
		l             floodgate.Limit
		share, bursts int64
	}
	total := make(map[string]*sums)
	for _, s := range stores {
		for i := range s.slices.shards.parts {
			for k, e := range s.slices.shards.parts[i].m {
				if !now.Before(e.until) || e.share == 0 {
					continue
				}
				if total[k] == nil {
					total[k] = &sums{l: e.limit}
				}
				total[k].share += e.share
				total[k].bursts += e.burst
				if st, _ := e.tb.Step(e.params(), s.slices.micros(now), 0); st.Taken < 0 {
					t.Errorf("%s: a bucket holds more than its burst: %+v", k, st)
				}
			}
		}
	}
	for k, x := range total {
		if x.share > x.l.Limit || x.bursts > x.l.Capacity() {
			t.Errorf("%s at %v: live slices add up to %d per period and %d of burst, above %v", k, now.Sub(t0), x.share, x.bursts, x.l)
		}
	}
}

// simulate runs demand on the instances for span of the clock, in steps
// of up to 10 ms of the fake clock plus the real time the step took: in
// each phase of a second, each instance is busy or idle at random (and
// one phase in four, of up to 3 s, all are idle, so that slices start
// full after some and not after others), and each busy one sends, from
// two goroutines at once, requests of cost 1 to 3 adding up to about
// rate units per Period in all (so that the busy instances together ask
// for more than the limit). Each store's idle slices are swept every
// SliceRenew of the clock, as its sweeper does in real time. It returns
// every admission and the units asked.
func simulate(t *testing.T, stores []*Store, clock *paceClock, l floodgate.Limit, span time.Duration, seed uint64) ([]admission, int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	var mu sync.Mutex
	var got []admission
	var asked int64
	busy := make([]bool, len(stores))
	end := clock.Now().Add(span)
	phaseEnd := clock.Now()
	lastSweep := clock.Now()
	var lastReal time.Duration
	for steps := 0; clock.Now().Before(end) && steps < 1_000_000; steps++ {
		if !clock.Now().Before(phaseEnd) {
			phaseEnd = clock.Now().Add(time.Second)
			for i := range busy {
				busy[i] = rng.IntN(3) > 0
			}
			if rng.IntN(4) == 0 {
				// A quiet spell, around the time after which a slice
				// starts full (the refill time, the term and the grace).
				phaseEnd = clock.Now().Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
				clear(busy)
			}
		}
		dt := time.Duration(1+rng.IntN(10_000)) * time.Microsecond
		// Units each busy instance asks for in this step: 2× the limit
		// shared by the busy ones, over dt and the real time the last
		// step took (which the clock adds: on a loaded machine, more
		// than dt), so that demand stays above the limit however slowly
		// the test runs.
		per := 2 * l.Limit * (dt + lastReal).Microseconds() / l.Period.Microseconds()
		stepStart := time.Now()
		var wg sync.WaitGroup
		for i, s := range stores {
			if !busy[i] {
				continue
			}
			seeds := [2]uint64{rng.Uint64(), rng.Uint64()}
			for g := range 2 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(seeds[g], 1))
					for left := per/2 + int64(r.IntN(3)); left > 0; {
						cost := min(left, 1+r.Int64N(3))
						left -= cost
						d, err := s.Apply(context.Background(), floodgate.Request{Key: "k", Limit: l, Cost: cost})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						asked += cost
						if d.Allowed {
							got = append(got, admission{d.Now, cost})
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		// Each store's sweeper, on the fake clock's time.
		for _, s := range stores {
			if clock.Now().Sub(lastSweep) >= s.slices.renew {
				s.slices.sweep(context.Background(), clock.Now(), false)
			}
		}
		if clock.Now().Sub(lastSweep) >= stores[0].slices.renew {
			lastSweep = clock.Now()
		}
		clock.Advance(dt)
		lastReal = time.Since(stepStart)
	}
	return got, asked
}

// TestSliceZeroOverrun runs several instances of one Redis with random,
// shifting demand above the limit on a clock that moves with real time
// and, faster, by the simulation's steps and during each grant call
// (paceClock, lagHome), and checks every pair of admissions of all
// instances together against the limit's arrival curve (zero overrun),
// and replays them into the memory store's bucket, which must admit them
// all.
func TestSliceZeroOverrun(t *testing.T) {
	addr := standaloneAddr(t)
	limits := map[string]floodgate.Limit{
		"token_bucket":         {Algorithm: floodgate.TokenBucket, Limit: 200, Period: time.Second, LocalBudget: 200},
		"gcra_burst":           {Algorithm: floodgate.GCRA, Limit: 100, Period: time.Second, Burst: 300, LocalBudget: 100},
		"gcra_small_burst":     {Algorithm: floodgate.GCRA, Limit: 300, Period: time.Second, Burst: 20, LocalBudget: 300},
		"token_bucket_capped":  {Algorithm: floodgate.TokenBucket, Limit: 150, Period: 500 * time.Millisecond, Burst: 60, LocalBudget: 60},
		"token_bucket_1_per_s": {Algorithm: floodgate.TokenBucket, Limit: 7, Period: time.Second, LocalBudget: 7},
	}
	for name, l := range limits {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(4) {
				clock := newPaceClock(t0)
				stores := sliceInstances(t, addr, 4, clock, seed)
				for _, s := range stores {
					s.slices.home.(*lagHome).check = func() { checkSlices(t, stores, clock) }
				}
				got, asked := simulate(t, stores, clock, l, 20*time.Second, seed)
				checkArrivalCurve(t, l, got)
				replayAdmitted(t, l, got)
				var units int64
				for _, a := range got {
					units += a.cost
				}
				t.Logf("seed %d: %d of %d units asked admitted; the limit allows %d over the span", seed, units, asked, l.Capacity()+l.Limit*20*int64(time.Second/l.Period))
				for _, s := range stores {
					s.Close()
				}
			}
		})
	}
}

// TestSliceUtilisation measures the fraction of the limit admitted with
// demand above the limit that moves between three instances every few
// seconds (one busy, then another, then all three, then one again), for
// each renewal interval: the figures of "Rate slices" in docs/redis.md.
func TestSliceUtilisation(t *testing.T) {
	addr := standaloneAddr(t)
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 1000, Period: time.Second, Burst: 100, LocalBudget: 1000}
	phases := [][]bool{{true, false, false}, {false, true, false}, {true, true, true}, {false, false, true}}
	const phase = 3 * time.Second
	for _, renew := range []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
		clock := floodgatetest.NewFakeClock(t0)
		// A long term: idle instances give their slices back after two
		// renewals anyway, and Redis, which expires the grants in real
		// time, keeps them however slowly the test runs.
		stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t), Clock: clock,
			SliceRenew: renew, SliceTerm: time.Minute, SliceGrace: 20 * time.Millisecond})
		var total, allowed int64
		var perPhase []string
		lastSweep := clock.Now()
		for _, busy := range phases {
			var admitted int64
			start := clock.Now()
			for clock.Now().Sub(start) < phase {
				const dt = time.Millisecond
				for i, s := range stores {
					if !busy[i] {
						continue
					}
					// Each busy instance asks for 2× the limit.
					for range 2 * l.Limit / 1000 {
						d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1})
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							admitted++
						}
					}
				}
				clock.Advance(dt)
				if clock.Now().Sub(lastSweep) >= renew {
					lastSweep = clock.Now()
					for _, s := range stores {
						s.slices.sweep(t.Context(), clock.Now(), false)
					}
				}
			}
			allowed += admitted
			total += l.Limit * int64(phase/l.Period)
			perPhase = append(perPhase, fmt.Sprintf("%.1f%%", 100*float64(admitted)/float64(l.Limit*int64(phase/l.Period))))
		}
		frac := float64(allowed) / float64(total)
		t.Logf("renew %v: %.1f%% of the limit admitted over %v (per phase: %s)", renew, 100*frac, time.Duration(len(phases))*phase, strings.Join(perPhase, ", "))
		if frac < 0.8 {
			t.Errorf("renew %v: %.1f%% of the limit admitted, want at least 80%%", renew, 100*frac)
		}
		for _, s := range stores {
			s.Close()
		}
	}
}

// TestSliceStartsFull: a slice of a key nobody admitted on for the
// bucket's refill time (plus the grace) starts with its burst, so a fresh
// key admits its burst at once; a slice taken sooner starts empty.
func TestSliceStartsFull(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	// A long term, so that Redis, which expires the marks in real time,
	// keeps them however slowly the test runs.
	const grace, term = 20 * time.Millisecond, 30 * time.Second
	stores := newInstances(t, addr, 2, Options{Prefix: testPrefix(t), Clock: clock,
		SliceRenew: 50 * time.Millisecond, SliceTerm: term, SliceGrace: grace})
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 5, LocalBudget: 10}
	burst := func(s *Store) int {
		n := 0
		for range 10 {
			d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := burst(stores[0]); n != 5 {
		t.Errorf("fresh key: %d admitted at once, want the burst, 5", n)
	}
	// The first instance gives its slice back; the key was used just now,
	// so the second starts empty.
	stores[0].slices.sweep(t.Context(), clock.Now(), true)
	clock.Advance(time.Millisecond)
	if n := burst(stores[1]); n != 0 {
		t.Errorf("key used 1 ms ago: %d admitted at once, want 0", n)
	}
	// Idle past the mark (the grant's end plus a term) and the grace by
	// 1 ms, not the refill time (500 ms): the slice starts with what 1 ms
	// earns, nothing.
	stores[1].slices.sweep(t.Context(), clock.Now(), true)
	clock.Advance(2*term + grace + time.Millisecond)
	if n := burst(stores[0]); n != 0 {
		t.Errorf("key idle for less than its refill time after the mark: %d admitted at once, want 0", n)
	}
	// Alone, and idle past the mark and the grace by 300 ms: the slice
	// starts with what its share (the whole rate) earned in them, 3.
	stores[0].slices.sweep(t.Context(), clock.Now(), true)
	clock.Advance(2*term + grace + 300*time.Millisecond)
	if n := burst(stores[1]); n != 3 {
		t.Errorf("key idle for 300 ms after the mark and the grace: %d admitted at once, want 3", n)
	}
	// Idle past the mark, the grace and the refill time: full again.
	stores[1].slices.sweep(t.Context(), clock.Now(), true)
	clock.Advance(2*term + grace + 500*time.Millisecond + time.Millisecond)
	if n := burst(stores[0]); n != 5 {
		t.Errorf("key idle for its refill time: %d admitted at once, want 5", n)
	}
}

// TestSliceSparseKey: a key asked now and then (a user's 10 per minute,
// once every 30 or 60 s, from one instance or another) is admitted each
// time: a lone holder starts with what its share earned since anyone may
// last have admitted (the mark plus the grace), not empty.
func TestSliceSparseKey(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	pace := newPacer(clock)
	stores := newInstances(t, addr, 2, Options{Prefix: testPrefix(t), Clock: clock}) // default renew, term, grace
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute, LocalBudget: 10}
	burst := func(s *Store) int {
		n := 0
		for range 12 {
			d, err := s.Apply(t.Context(), floodgate.Request{Key: "u", Limit: l, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				n++
			}
		}
		return n
	}
	if n := burst(stores[0]); n != 10 {
		t.Fatalf("fresh key: %d admitted at once, want the burst, 10", n)
	}
	// The mark is the grant's end plus a term: t0 + 4 s; the silence
	// begins half a second later. 55.5 s of it earn ⌊10 × 55.5 / 60⌋ = 9.
	clock.Advance(time.Minute)
	pace.keepAhead()
	if n := burst(stores[0]); n != 9 {
		t.Errorf("a minute later: %d admitted at once, want 9", n)
	}
	// Another instance, 30 s later: the first's grant has ended; 25.5 s of
	// silence earn 4.
	for i := range 6 {
		clock.Advance(30 * time.Second)
		pace.keepAhead()
		d, err := stores[(i+1)%2].Apply(t.Context(), floodgate.Request{Key: "u", Limit: l, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Errorf("request %d, 30 s after the last: denied: %+v", i, d)
		}
	}
}

// TestSliceCloseGivesBack: an instance that holds the whole rate gives it
// back at Close, so that another takes it at its next grant call rather
// than after the grant's term; without the Close it would get nothing.
func TestSliceCloseGivesBack(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t), Clock: clock,
		SliceRenew: 50 * time.Millisecond, SliceTerm: 10 * time.Second})
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 100, Period: time.Second, LocalBudget: 100}
	held := func(s *Store) int64 {
		sh := s.slices.shards.of(s.Key("k", l))
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if e := sh.m[s.Key("k", l)]; e != nil {
			return e.share
		}
		return 0
	}
	apply := func(s *Store) {
		if _, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	apply(stores[0])
	if got := held(stores[0]); got != 100 {
		t.Fatalf("first instance holds %d, want 100", got)
	}
	apply(stores[1])
	if got := held(stores[1]); got != 0 {
		t.Fatalf("second instance holds %d while the first holds all, want 0", got)
	}
	if err := stores[0].Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(60 * time.Millisecond) // the second's renewal is due
	apply(stores[2])
	apply(stores[1])
	if got := held(stores[1]) + held(stores[2]); got != 100 {
		t.Errorf("after the first closed, the others hold %d, want 100", got)
	}
	if got := stores[0].slices.shards.of(stores[0].Key("k", l)).m; len(got) != 0 {
		t.Errorf("closed instance still has %d slices", len(got))
	}
}

// TestSliceBatch: a batch with sliced limits is all or nothing. The slices
// decide first and take what they admit; the others go to Redis as a batch
// when every slice admitted, as a denied batch (nothing taken) when one
// did not; and a slice gives back what it took when anything denied.
func TestSliceBatch(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t), Clock: clock, SliceTerm: time.Hour})[0]
	ctx := t.Context()
	sl := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Hour, Burst: 10, LocalBudget: 10}
	fw := floodgate.Limit{Limit: 2, Period: time.Hour}
	left := func(key string, l floodgate.Limit) int64 {
		t.Helper()
		d, err := s.Apply(ctx, floodgate.Request{Key: key, Limit: l})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	batch := func(rs ...floodgate.Request) []floodgate.Decision {
		t.Helper()
		ds, err := s.ApplyBatch(ctx, rs)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	// The slice's first grant: the key is new, so it starts full.
	if d, err := s.Apply(ctx, floodgate.Request{Key: "s", Limit: sl, Cost: 1}); err != nil || !d.Allowed {
		t.Fatalf("first sliced request: %+v, %v", d, err)
	}
	// Both have room: both take.
	ds := batch(floodgate.Request{Key: "s", Limit: sl, Cost: 3}, floodgate.Request{Key: "f", Limit: fw, Cost: 2})
	if !ds[0].Allowed || !ds[1].Allowed || left("s", sl) != 6 || left("f", fw) != 0 {
		t.Fatalf("batch with room: %+v; left %d and %d, want both admitted, 6 and 0 left", ds, left("s", sl), left("f", fw))
	}
	// Redis denies: the slice gets its units back and reports its state.
	ds = batch(floodgate.Request{Key: "s", Limit: sl, Cost: 4}, floodgate.Request{Key: "f", Limit: fw, Cost: 1})
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 6 || ds[1].Allowed || left("s", sl) != 6 {
		t.Fatalf("batch denied in Redis: %+v, %d left on the slice; want both denied, the slice's 4 given back (6 left, RetryAfter 0)", ds, left("s", sl))
	}
	// The slice denies: Redis takes nothing, and reports the room it had.
	ds = batch(floodgate.Request{Key: "g", Limit: fw, Cost: 1}, floodgate.Request{Key: "s", Limit: sl, Cost: 7})
	if ds[1].Allowed || ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 2 || left("g", fw) != 2 || left("s", sl) != 6 {
		t.Fatalf("batch denied by the slice: %+v; left %d and %d; want both denied, nothing taken (2 and 6 left)", ds, left("g", fw), left("s", sl))
	}
	// Two sliced keys, the second denying: the first gives back.
	ds = batch(floodgate.Request{Key: "s", Limit: sl, Cost: 2}, floodgate.Request{Key: "s2", Limit: sl, Cost: 11})
	if ds[0].Allowed || ds[1].Allowed || left("s", sl) != 6 {
		t.Fatalf("two slices, the second denying: %+v, %d left; want both denied and 6 left", ds, left("s", sl))
	}
}

// TestSliceRefusals: what a sliced limit cannot do is an error naming the
// field, and bad options name theirs; the memory store ignores the
// LocalBudget.
func TestSliceRefusals(t *testing.T) {
	addr := standaloneAddr(t)
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t)})[0]
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, LocalBudget: 5}
	_, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1, Now: t0})
	if !errors.Is(err, floodgate.ErrInvalidRequest) || !strings.Contains(err.Error(), "now:") {
		t.Errorf("Apply with Now: %v, want ErrInvalidRequest naming now", err)
	}
	_, err = s.Reserve(t.Context(), floodgate.HoldRequest{ID: "r", TTL: time.Second, Requests: []floodgate.Request{{Key: "a", Limit: l, Cost: 1}}})
	if !errors.Is(err, floodgate.ErrInvalidRequest) || !strings.Contains(err.Error(), "local_budget") {
		t.Errorf("Reserve: %v, want ErrInvalidRequest naming local_budget", err)
	}
	bad := l
	bad.LocalBudget = 11
	if err := bad.Validate(); !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.Contains(err.Error(), "local_budget") {
		t.Errorf("Validate of %v: %v, want ErrInvalidLimit naming local_budget", bad, err)
	}
	if _, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: bad, Cost: 1}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("Apply of %v: %v, want ErrInvalidLimit", bad, err)
	}
	for _, o := range []Options{{SliceRenew: -1}, {SliceTerm: -1}, {SliceGrace: -1}, {SliceRenew: time.Second, SliceTerm: time.Millisecond}} {
		if _, err := New(newRueidis(t, addr), &o); err == nil || !strings.Contains(err.Error(), "Options.Slice") {
			t.Errorf("New with %+v: %v, want an error naming the option", o, err)
		}
	}
	m := memstore.New(nil)
	defer m.Close()
	for i := range 12 {
		d, err := m.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1, Now: t0})
		if err != nil || d.Allowed != (i < 10) {
			t.Fatalf("memstore request %d: %+v, %v; want the bucket's own decision", i, d, err)
		}
	}
}

// BenchmarkSliceHotKey decides one unit per operation of one GCRA key from
// three instances, each a store over its own client, 30 goroutines in
// all, at the real clock, without and with rate slices (LocalBudget the
// whole limit), over its limit (2000/s, burst 400) and under it (10
// million/s). It reports decisions/s, redis-calls/op (scripts Redis ran
// per decision, the grant and mark calls included) and, over the limit,
// utilisation: units admitted over what the arrival curve allows in the
// run's time, Burst + rate × elapsed.
func BenchmarkSliceHotKey(b *testing.B) {
	addr := standaloneAddr(b)
	c := newRueidis(b, addr)
	for _, load := range []string{"over", "under"} {
		for _, budget := range []int64{0, 1} {
			name := "plain"
			if budget > 0 {
				name = "slices"
			}
			b.Run("load="+load+"/mode="+name, func(b *testing.B) {
				l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 2000, Period: time.Second, Burst: 400}
				if load == "under" {
					l.Limit, l.Burst = 10_000_000, 0
				}
				l.LocalBudget = budget * l.Limit
				stores := newInstances(b, addr, 3, Options{Prefix: testPrefix(b)})
				for _, s := range stores {
					if _, err := s.Apply(context.Background(), floodgate.Request{Key: "warm", Limit: l, Cost: 1}); err != nil {
						b.Fatal(err)
					}
				}
				before := scriptCalls(b, c)
				var n, admitted atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				start := time.Now()
				for g := range 30 {
					s := stores[g%len(stores)]
					wg.Go(func() {
						for i := n.Add(1); i <= int64(b.N); i = n.Add(1) {
							d, err := s.Apply(context.Background(), floodgate.Request{Key: "hot", Limit: l, Cost: 1})
							if err != nil {
								b.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
				b.ReportMetric(float64(scriptCalls(b, c)-before)/float64(b.N), "redis-calls/op")
				if load == "over" {
					allowed := float64(l.Capacity()) + float64(l.Limit)*elapsed.Seconds()
					b.ReportMetric(float64(admitted.Load())/allowed, "utilisation")
				}
			})
		}
	}
}

// TestSliceCluster runs rate slices on a 3-master Redis Cluster: the grant
// and the mark of each key are single keys, routed to their own slots, and
// every key the slices write has a TTL. Keys of awkward subjects are granted,
// start full, and the two instances together admit each key's burst once.
func TestSliceCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newRueidisCluster(t, cl.Addrs())
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	var stores []*Store
	for range 2 {
		s, err := New(newRueidisCluster(t, cl.Addrs()), &Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Hour, Burst: 4, LocalBudget: 10}
	for _, subject := range []string{"{evil}", "a}b{c", "user:7", "%7B", strings.Repeat("x", 300)} {
		admitted := 0
		for i := range 12 {
			d, err := stores[i%2].Apply(t.Context(), floodgate.Request{Key: subject, Limit: l, Cost: 1})
			if err != nil {
				t.Fatalf("%.20q: %v", subject, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		// The first instance is granted the whole rate and starts full; the
		// second holds nothing while the first does (10 per hour earns no
		// token in the test's time).
		if admitted != 4 {
			t.Errorf("%.20q: %d admitted, want the burst, 4", subject, admitted)
		}
	}
}
