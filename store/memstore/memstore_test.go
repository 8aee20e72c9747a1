package memstore_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// start is where the fake clocks of these tests start.
var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newStore(t *testing.T, opts *memstore.Options) *memstore.Store {
	t.Helper()
	s := memstore.New(opts)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		opts *memstore.Options
	}{
		{"defaults", nil},
		// One shard: every key and every batch meet on one lock.
		{"one_shard", &memstore.Options{Shards: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			floodgatetest.Run(t, func(t *testing.T) floodgate.Store { return newStore(t, tt.opts) })
		})
	}
}

// TestConformanceServerTime runs the suite with zero Request.Now, so the
// store reads its own clock: a FakeClock, with the sweeper running on it.
func TestConformanceServerTime(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
		return newStore(t, &memstore.Options{Clock: clock, SweepInterval: time.Millisecond})
	}, floodgatetest.Options{ServerTime: true})
}

// steppingClock moves forward by step each time it is read, so a store
// that reads it sees time pass at the pace of its own decisions.
type steppingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// TestConformanceServerTimeMoving runs the suite with the store's clock
// moving 20µs per reading: in the differential test, whose periods are
// 100µs to 20ms in this mode, windows end, buckets refill and leases
// expire by the store's own clock.
func TestConformanceServerTimeMoving(t *testing.T) {
	clock := &steppingClock{now: start, step: 20 * time.Microsecond}
	floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
		return newStore(t, &memstore.Options{Clock: clock})
	}, floodgatetest.Options{ServerTime: true})
}

// allLimits has a limit of every algorithm, each with a period of a minute.
func allLimits() []floodgate.Limit {
	var ls []floodgate.Limit
	for _, alg := range floodgate.Algorithms {
		ls = append(ls, floodgate.Limit{Algorithm: alg, Limit: 5, Period: time.Minute})
	}
	return ls
}

var leases atomic.Int64

// take takes one unit of l for key (under a new lease for Concurrency),
// failing the test unless it is allowed.
func take(t *testing.T, s floodgate.Store, key string, l floodgate.Limit, now time.Time) floodgate.Decision {
	t.Helper()
	r := floodgate.Request{Key: key, Limit: l, Cost: 1, Now: now}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease = fmt.Sprint("lease", leases.Add(1))
	}
	d, err := s.Apply(t.Context(), r)
	if err != nil {
		t.Fatalf("Apply(%q, %s): %v", key, l, err)
	}
	if !d.Allowed {
		t.Fatalf("Apply(%q, %s) = %+v, want allowed", key, l, d)
	}
	return d
}

// TestSweep checks that Sweep drops each key exactly when its ResetAfter
// has passed on the store's clock: 12s for the buckets (one unit of 5 per
// minute), a minute for fixed_window, sliding_window_log and concurrency,
// two minutes for sliding_window (its count weighs on the next window).
func TestSweep(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	s := newStore(t, &memstore.Options{Clock: clock, SweepInterval: -1})
	const keys = 100
	expiring := map[time.Duration]int{}
	for _, l := range allLimits() {
		for k := range keys {
			d := take(t, s, fmt.Sprint("k", k), l, time.Time{})
			expiring[d.ResetAfter]++
		}
	}
	if got, want := s.Len(), keys*len(floodgate.Algorithms); got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	if want := map[time.Duration]int{12 * time.Second: 2 * keys, time.Minute: 3 * keys, 2 * time.Minute: keys}; !maps.Equal(expiring, want) {
		t.Fatalf("keys by ResetAfter = %v, want %v", expiring, want)
	}
	left := s.Len()
	for _, after := range slices.Sorted(maps.Keys(expiring)) {
		clock.Set(start.Add(after - time.Microsecond))
		if got := s.Sweep(); got != 0 {
			t.Errorf("Sweep a microsecond before %v dropped %d keys, want 0", after, got)
		}
		clock.Set(start.Add(after))
		if got, want := s.Sweep(), expiring[after]; got != want {
			t.Errorf("Sweep at %v dropped %d keys, want %d", after, got, want)
		}
		left -= expiring[after]
		if got := s.Len(); got != left {
			t.Errorf("Len after Sweep at %v = %d, want %d", after, got, left)
		}
	}
	if got := s.Sweep(); got != 0 {
		t.Errorf("a last Sweep dropped %d, want 0", got)
	}
}

// TestSweepRequestsWithNow is the regression test of a bug: the sweeper
// compared the store's clock with deadlines made from Request.Now, so a
// caller whose clock was behind the store's lost live state to the sweeper
// and got more than its limit. A key now lives for its ResetAfter by the
// store's clock, as a Redis TTL does.
func TestSweepRequestsWithNow(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	s := newStore(t, &memstore.Options{Clock: clock, SweepInterval: -1})
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(fmt.Sprint("skew=", skew), func(t *testing.T) {
			now := clock.Now().Add(skew)
			for _, l := range allLimits() {
				for range 5 {
					take(t, s, "k", l, now)
				}
			}
			if got := s.Sweep(); got != 0 {
				t.Errorf("Sweep dropped %d live keys, want 0", got)
			}
			for _, l := range allLimits() {
				r := floodgate.Request{Key: "k", Limit: l, Cost: 1, Now: now, Lease: "other"}
				if l.Algorithm != floodgate.Concurrency {
					r.Lease = ""
				}
				d, err := s.Apply(t.Context(), r)
				if err != nil || d.Allowed {
					t.Errorf("Apply(%s) after Sweep = %+v, %v; want denied: the limit is used up", l, d, err)
				}
			}
			clock.Advance(2 * time.Minute)
			if got, want := s.Sweep(), len(floodgate.Algorithms); got != want {
				t.Errorf("Sweep two minutes later by the store's clock dropped %d keys, want %d", got, want)
			}
		})
	}
}

// TestSweeperRuns checks that the background sweeper drops expired keys by
// itself. The keys expire on the fake clock; the sweeper's ticker is real,
// so the test waits for it, bounded.
func TestSweeperRuns(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	s := newStore(t, &memstore.Options{Clock: clock, Shards: 4, SweepInterval: 4 * time.Millisecond})
	for _, l := range allLimits() {
		for k := range 50 {
			take(t, s, fmt.Sprint("k", k), l, time.Time{})
		}
	}
	clock.Advance(2 * time.Minute)
	if !poll(func() bool { return s.Len() == 0 }) {
		t.Fatalf("Len = %d ten seconds after every key expired, want 0", s.Len())
	}
}

// TestMemoryBounded adds new keys for many periods while sweeping, and
// checks that the keys held and the heap stay bounded by the keys live in
// one period, not by all the keys ever seen. Go's maps keep their memory
// when keys are deleted and some grow once more as deleted slots pile up,
// so the heap levels off at about twice its first size (measured: 2.2 MB
// to 4.3 MB for 20k keys, then flat over 40 rounds).
func TestMemoryBounded(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	s := newStore(t, &memstore.Options{Clock: clock, Shards: 16, SweepInterval: -1})
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}
	const (
		perRound = 5_000
		rounds   = 25
	)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var first uint64
	for round := range rounds {
		for k := range perRound {
			take(t, s, fmt.Sprintf("round%d:key%d", round, k), l, time.Time{})
		}
		if got := s.Len(); got != perRound {
			t.Fatalf("round %d: Len = %d, want %d (the keys of this round only)", round, got, perRound)
		}
		clock.Advance(time.Second)
		s.Sweep()
		if round == 0 {
			first = heap()
		}
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len after the last sweep = %d, want 0", got)
	}
	if h := heap(); h > 3*first {
		t.Errorf("heap grew from %d to %d bytes over %d rounds of %d keys, each swept: more than 3 times", first, h, rounds, perRound)
	}
}

// sweepers counts the goroutines of the stores' sweepers (each a
// loop.Loop, started by memstore.New: no other loop runs in these tests),
// whether they have begun to run or not.
func sweepers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by github.com/floodgate-rl/floodgate/internal/loop.(*Loop).Start")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// poll calls f until it returns true, for at most ten seconds, and returns
// its last answer. Goroutines take a moment to exit after Close returns.
func poll(f func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if f() || time.Now().After(deadline) {
			return f()
		}
	}
}

func TestCloseStopsSweeper(t *testing.T) {
	// Earlier tests' goroutines may still be on their way out: count from
	// when they have gone, or at least from when the sweepers have.
	poll(func() bool { return sweepers() == 0 })
	before := runtime.NumGoroutine()
	stores := make([]*memstore.Store, 10)
	for i := range stores {
		stores[i] = memstore.New(&memstore.Options{SweepInterval: time.Millisecond})
	}
	if got := sweepers(); got != len(stores) {
		t.Errorf("%d sweeper goroutines with %d stores, want %d", got, len(stores), len(stores))
	}
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	if !poll(func() bool { return sweepers() == 0 }) {
		t.Errorf("%d sweeper goroutines ten seconds after Close, want 0", sweepers())
	}
	if !poll(func() bool { return runtime.NumGoroutine() <= before }) {
		t.Errorf("%d goroutines after Close, %d before New: something leaks", runtime.NumGoroutine(), before)
	}
	// The store answers after Close (only the sweeper stops).
	l := floodgate.Limit{Limit: 1, Period: time.Second}
	take(t, stores[0], "k", l, time.Time{})
	// A store without a sweeper closes too.
	if err := memstore.New(&memstore.Options{SweepInterval: -1}).Close(); err != nil {
		t.Errorf("Close without a sweeper: %v", err)
	}
}

// TestZeroAllocs checks the package doc's claim: a decision on an existing
// key of an O(1) algorithm allocates nothing, through the store or a
// Limiter, allowed or denied, with the store's clock or the request's.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	clock := floodgatetest.NewFakeClock(start)
	s := newStore(t, &memstore.Options{Clock: clock})
	limiter, err := floodgate.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		for _, limit := range []int64{1_000_000, 1} { // allowed, then denied
			l := floodgate.Limit{Algorithm: alg, Limit: limit, Period: time.Second}
			key := fmt.Sprint(alg, limit)
			take(t, s, key, l, time.Time{})
			calls := []struct {
				name string
				f    func()
			}{
				{"Store.Apply", func() { _, _ = s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1}) }},
				{"Store.Apply/now", func() { _, _ = s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1, Now: start}) }},
				{"Limiter.Allow", func() { _, _ = limiter.Allow(ctx, key, l) }},
			}
			for _, c := range calls {
				if got := testing.AllocsPerRun(200, c.f); got != 0 {
					t.Errorf("%s, %s: %v allocations per call, want 0", c.name, l, got)
				}
			}
		}
	}
}

// TestApplyBatchOverlapping runs batches over overlapping keys, in every
// order and with repeats, on few shards: no deadlock, and all or nothing:
// each key ends with exactly the units of the admitted batches that held it.
func TestApplyBatchOverlapping(t *testing.T) {
	s := newStore(t, &memstore.Options{Shards: 4, SweepInterval: -1})
	const (
		keys       = 12
		goroutines = 8
		capacity   = 200
	)
	batches := 300
	if testing.Short() {
		batches = 50
	}
	l := floodgate.Limit{Limit: capacity, Period: time.Hour}
	now := start
	taken := make([][keys]int64, goroutines)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range batches {
					rs := make([]floodgate.Request, 1+rng.IntN(5))
					ks := make([]int, len(rs))
					for i := range rs {
						ks[i] = rng.IntN(keys)
						rs[i] = floodgate.Request{Key: fmt.Sprint("k", ks[i]), Limit: l, Cost: 1 + rng.Int64N(3), Now: now}
					}
					ds, err := s.ApplyBatch(context.Background(), rs)
					if err != nil {
						t.Errorf("ApplyBatch: %v", err)
						return
					}
					if !floodgate.Combine(ds).Allowed {
						continue
					}
					for i, r := range rs {
						taken[g][ks[i]] += r.Cost
					}
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("batches still running after a minute: deadlock")
	}
	for k := range keys {
		var sum int64
		for g := range goroutines {
			sum += taken[g][k]
		}
		d, err := s.Apply(t.Context(), floodgate.Request{Key: fmt.Sprint("k", k), Limit: l, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Remaining, capacity-sum; got != want {
			t.Errorf("key %d: Remaining = %d after admitted batches took %d of %d, want %d", k, got, sum, capacity, want)
		}
	}
}

// TestLocalBudgetIgnored checks that memstore accepts a Limit with a
// LocalBudget and decides it as the same limit without one: in process,
// budget is local already.
func TestLocalBudgetIgnored(t *testing.T) {
	s := memstore.New(nil)
	defer s.Close()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		budgeted := floodgate.Limit{Algorithm: alg, Limit: 3, Period: time.Minute, LocalBudget: 2}
		plain := budgeted
		plain.LocalBudget = 0
		for i := range 5 {
			dl, err := s.Apply(t.Context(), floodgate.Request{Key: "budgeted", Limit: budgeted, Cost: 1, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			dp, err := s.Apply(t.Context(), floodgate.Request{Key: "plain", Limit: plain, Cost: 1, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if dl != dp {
				t.Errorf("%s request %d: with a local budget %+v, without %+v", alg, i, dl, dp)
			}
		}
	}
}
