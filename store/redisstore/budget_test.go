package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	iloop "github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// newInstances returns n stores over n clients of addr, as n instances of
// an application would have, closed when the test ends.
func newInstances(t testing.TB, addr string, n int, o Options) []*Store {
	t.Helper()
	var stores []*Store
	for range n {
		s, err := New(newRueidis(t, addr), &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	return stores
}

// admission is a decision a test saw admitted.
type admission struct {
	now  time.Time
	cost int64
}

// replayAdmitted checks that every admitted request, replayed in time order
// into memstore (the algorithm decided in process), is admitted there too:
// no sequence of admissions that the limit itself would refuse. Units
// claimed and never spent are not replayed, which is what makes local
// budgets exact: they were counted, but not admitted.
func replayAdmitted(t *testing.T, l floodgate.Limit, got []admission) {
	t.Helper()
	sort.SliceStable(got, func(i, j int) bool { return got[i].now.Before(got[j].now) })
	m := memstore.New(nil)
	defer m.Close()
	l.LocalBudget = 0
	for i, a := range got {
		d, err := m.Apply(context.Background(), floodgate.Request{Key: "k", Limit: l, Cost: a.cost, Now: a.now})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("%v: admission %d of %d (cost %d at %v) exceeds the limit: %+v", l, i, len(got), a.cost, a.now.Sub(t0), d)
		}
	}
}

// TestBudgetZeroOverrun races three instances, ten goroutines each, for
// one key of a limit with a local budget, on a shared fake clock that steps
// through several windows (a quarter of a period at a time, giving back
// idle budgets on some steps): every unit admitted, replayed into memstore at its time, is
// admitted there too; and with every goroutine trying until it is denied,
// each step admits all that the limit allows.
func TestBudgetZeroOverrun(t *testing.T) {
	addr := standaloneAddr(t)
	limits := map[string]floodgate.Limit{
		"fixed_window":   {Limit: 100, Period: time.Second, LocalBudget: 10},
		"first_hit":      {Limit: 100, Period: time.Second, Window: floodgate.FirstHit, LocalBudget: 10},
		"sliding_window": {Algorithm: floodgate.SlidingWindow, Limit: 100, Period: time.Second, LocalBudget: 10},
		"count_rejected": {Limit: 100, Period: time.Second, CountRejected: true, LocalBudget: 64},
		"sliding_count_rejected": {Algorithm: floodgate.SlidingWindow, Limit: 100, Period: time.Second, CountRejected: true,
			LocalBudget: 64},
	}
	for name, l := range limits {
		t.Run(name, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(t0.Add(137 * time.Millisecond))
			stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t), Clock: clock, DenyCache: 100})
			var mu sync.Mutex
			var got []admission
			for step := range 10 {
				var wg sync.WaitGroup
				var admitted atomic.Int64
				for g := range 30 {
					s := stores[g%3]
					wg.Go(func() {
						for range 200 {
							cost := int64(1 + (g/3+step)%3) // every instance has every cost
							d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: cost})
							if err != nil {
								t.Error(err)
								return
							}
							if !d.Allowed {
								return
							}
							admitted.Add(cost)
							mu.Lock()
							got = append(got, admission{clock.Now(), cost})
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				t.Logf("step %d at %v: %d admitted", step, clock.Now().Sub(t0), admitted.Load())
				if step == 0 && admitted.Load() < l.Limit-2 {
					// Costs are 1 to 3, and a denied goroutine stops: at
					// most 2 units can stay unclaimed, none held.
					t.Errorf("step 0: %d admitted, want at least %d of %d", admitted.Load(), l.Limit-2, l.Limit)
				}
				clock.Advance(l.Period / 4)
				if step%3 == 1 {
					for _, s := range stores {
						s.budgets.sweep(t.Context(), clock.Now(), false)
					}
				}
			}
			replayAdmitted(t, l, got)
		})
	}
}

// TestBudgetSeedScenario is TestSeedScenario with local budgets, at the
// server's clock: three instances, ten goroutines each, one day-long window
// of 100; every goroutine takes one unit until it is denied. Exactly 100
// are admitted: never more, and no unit stays claimed and unspent, because
// an instance's goroutines spend its budget before they see a denial.
func TestBudgetSeedScenario(t *testing.T) {
	addr := standaloneAddr(t)
	for _, l := range []floodgate.Limit{
		{Limit: 100, Period: 24 * time.Hour, Window: floodgate.FirstHit, LocalBudget: 8},
		{Algorithm: floodgate.SlidingWindow, Limit: 100, Period: 100 * 24 * time.Hour, LocalBudget: 8},
	} {
		t.Run(string(l.EffectiveAlgorithm()), func(t *testing.T) {
			stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t)})
			if got := seedScenario(t, stores, l); got != l.Limit {
				t.Errorf("%d admitted, want exactly %d", got, l.Limit)
			}
		})
	}
}

// redisCount is the count of a fixed window's state in Redis, whose key
// (Store.Key) is key: the counter of the latest window in the hash of an
// aligned window's counters, else a first-hit window's string (see
// stateKey).
func redisCount(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	m, err := c.Do(t.Context(), c.B().Hgetall().Key(key+":w").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if len(m) > 0 {
		latest, n := int64(-1), int64(0)
		for f, v := range m {
			start, err1 := strconv.ParseInt(f, 10, 64)
			count, err2 := strconv.ParseInt(v, 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("counters %v", m)
			}
			if start > latest {
				latest, n = start, count
			}
		}
		return n
	}
	v, err := c.Do(t.Context(), c.B().Get().Key(key+":f").Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	_, count, _ := strings.Cut(v, ":")
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil {
		t.Fatalf("state %q: %v", v, err)
	}
	return n
}

// TestBudgetGiveBack checks that unused claimed units go back to Redis, on
// an idle sweep and on Close: the count drops by exactly what was unused.
func TestBudgetGiveBack(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	clock := floodgatetest.NewFakeClock(t0)
	l := floodgate.Limit{Limit: 1000, Period: time.Minute, LocalBudget: 50}
	s, err := New(newRueidis(t, addr), &Options{Prefix: testPrefix(t), Clock: clock, BudgetIdle: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	noSweeper(s)
	key := s.Key("k", l)
	spend := func(n int) {
		for range n {
			d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1})
			if err != nil || !d.Allowed {
				t.Fatalf("Apply = %+v, %v", d, err)
			}
		}
	}
	spend(40)
	held := redisCount(t, c, key) - 40
	if held <= 0 || held > l.LocalBudget {
		t.Fatalf("after 40 admitted the count is %d: %d held, want 1 to %d", held+40, held, l.LocalBudget)
	}
	clock.Advance(time.Second)
	if n := s.budgets.sweep(t.Context(), clock.Now(), false); n != held {
		t.Errorf("idle sweep gave back %d, want %d", n, held)
	}
	if got := redisCount(t, c, key); got != 40 {
		t.Errorf("after the idle sweep the count is %d, want 40", got)
	}
	spend(25)
	held = redisCount(t, c, key) - 65
	if held <= 0 {
		t.Fatalf("after 65 admitted the count is %d, want more (a local budget)", held+65)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := redisCount(t, c, key); got != 65 {
		t.Errorf("after Close the count is %d, want 65 (%d given back)", got, held)
	}
}

// noSweeper keeps s's sweeper from ever ticking, so that a test sweeps
// when it chooses.
func noSweeper(s *Store) {
	s.budgets.sweeper.l.NewTicker = func(time.Duration) iloop.Ticker { return manualTicker{make(chan time.Time)} }
}

// TestBudgetReset checks that a Reset through the store forgets its local
// budget and denials: the key gets its whole budget back at once.
func TestBudgetReset(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t), Clock: clock, DenyCache: 10})[0]
	for _, l := range []floodgate.Limit{{Limit: 10, Period: time.Minute, LocalBudget: 4}, {Limit: 10, Period: time.Hour}} {
		admitted := func() int {
			n := 0
			for range 20 {
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
		if n := admitted(); n != 10 {
			t.Fatalf("%v: %d admitted, want 10", l, n)
		}
		if err := s.Reset(t.Context(), "k", l); err != nil {
			t.Fatal(err)
		}
		if n := admitted(); n != 10 {
			t.Errorf("%v: after Reset %d admitted, want 10", l, n)
		}
	}
}

// TestDenyCacheMatchesRedis decides one random sequence of requests twice
// at the same fake times, through a store with a deny cache and through one
// without (each with its own keys): every decision's Allowed is the same,
// so the cache never denies what Redis would admit; a cached denial's
// RetryAfter is above zero and no later than Redis's.
func TestDenyCacheMatchesRedis(t *testing.T) {
	addr := standaloneAddr(t)
	for _, l := range []floodgate.Limit{
		{Limit: 5, Period: time.Second},
		{Limit: 5, Period: time.Second, Window: floodgate.FirstHit},
		{Limit: 5, Period: time.Second, CountRejected: true},
		{Algorithm: floodgate.SlidingWindow, Limit: 5, Period: time.Second},
		{Algorithm: floodgate.SlidingWindow, Limit: 5, Period: time.Second, CountRejected: true},
		{Algorithm: floodgate.SlidingWindowLog, Limit: 5, Period: time.Second},
		{Algorithm: floodgate.TokenBucket, Limit: 5, Period: time.Second, Burst: 8},
		{Algorithm: floodgate.GCRA, Limit: 5, Period: time.Second, Burst: 3},
		{Algorithm: floodgate.Concurrency, Limit: 5, Period: time.Second},
	} {
		t.Run(l.String(), func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(t0.Add(123 * time.Millisecond))
			c := newRueidis(t, addr)
			cached, err := New(c, &Options{Prefix: testPrefix(t) + "-cached", Clock: clock, DenyCache: 16})
			if err != nil {
				t.Fatal(err)
			}
			plain, err := New(c, &Options{Prefix: testPrefix(t) + "-plain", Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(l.String()))))
			hits := 0
			for i := range 2000 {
				clock.Advance(time.Duration(rng.IntN(40_000)) * time.Microsecond)
				r := floodgate.Request{Key: "k", Limit: l, Cost: int64(1 + rng.IntN(3))}
				if l.Algorithm == floodgate.Concurrency {
					r.Lease = fmt.Sprint("l", rng.IntN(4))
					r.Release = rng.IntN(3) == 0
				}
				before := cached.deny.hits.Load()
				dc, err := cached.Apply(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				dp, err := plain.Apply(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				if dc.Allowed != dp.Allowed {
					t.Fatalf("request %d (cost %d at %v): cached Allowed %v, Redis alone %v (%+v)", i, r.Cost, clock.Now().Sub(t0), dc.Allowed, dp.Allowed, dp)
				}
				if cached.deny.hits.Load() != before {
					hits++
					if dc.RetryAfter <= 0 || dc.RetryAfter > dp.RetryAfter {
						t.Errorf("request %d: cached RetryAfter %v, want in (0, %v]", i, dc.RetryAfter, dp.RetryAfter)
					}
				}
			}
			t.Logf("%d of 2000 decisions were cached denials", hits)
			if !denialCacheable(l, l.EffectiveAlgorithm()) && cachedEntry(cached, cached.Key("k", l)) {
				t.Errorf("%v: a denial was cached", l)
			}
		})
	}
}

// cachedEntry reports whether s remembers a denial of key.
func cachedEntry(s *Store, key string) bool {
	sh := s.deny.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key] != nil
}

// TestDenyCacheAbusiveKey hammers one key far over its limit: after the
// limit's admissions and the one denial that Redis decides, every further
// request of the window is a cached denial, with no round trip.
func TestDenyCacheAbusiveKey(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	clock := floodgatetest.NewFakeClock(t0)
	s, err := New(c, &Options{Prefix: testPrefix(t), Clock: clock, DenyCache: 1000})
	if err != nil {
		t.Fatal(err)
	}
	l := floodgate.Limit{Limit: 10, Period: time.Second}
	// Load the script (EVALSHA, NOSCRIPT, EVAL) before counting.
	if _, err := s.Apply(t.Context(), floodgate.Request{Key: "warm", Limit: l, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, c)
	denied := 0
	for range 1000 {
		d, err := s.Apply(t.Context(), floodgate.Request{Key: "abuser", Limit: l, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
			if d.RetryAfter <= 0 || d.RetryAfter > time.Second || d.Remaining != 0 || d.Limit != 10 {
				t.Fatalf("denial %+v, want Limit 10, Remaining 0, RetryAfter in (0, 1s]", d)
			}
		}
	}
	calls := scriptCalls(t, c) - before
	if denied != 990 || calls != 11 {
		t.Errorf("%d denied in %d script calls, want 990 in 11 (hit rate %.3f)", denied, calls, float64(990-(calls-10))/990)
	}
	// At the window's end the cache lets requests through again.
	clock.Advance(time.Second)
	if d, err := s.Apply(t.Context(), floodgate.Request{Key: "abuser", Limit: l, Cost: 1}); err != nil || !d.Allowed {
		t.Errorf("next window: %+v, %v; want admitted", d, err)
	}
}

// TestDenyCacheBounded checks that the cache keeps at most about
// Options.DenyCache denials, however many keys are denied.
func TestDenyCacheBounded(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t), Clock: clock, DenyCache: 64})[0]
	l0 := floodgate.Limit{Limit: 1, Period: time.Minute}
	for i := range 500 {
		for range 2 {
			if _, err := s.Apply(t.Context(), floodgate.Request{Key: fmt.Sprint("k", i), Limit: l0, Cost: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	n := 0
	for i := range s.deny.shards.parts {
		n += len(s.deny.shards.parts[i].m)
	}
	if max := 64 + localShards; n == 0 || n > max {
		t.Errorf("%d denials remembered after 500 keys, want 1 to %d", n, max)
	}
}

// scriptCalls is the number of scripts the server has run.
func scriptCalls(t testing.TB, c rueidis.Client) int64 {
	t.Helper()
	stats := commandStats(t, c)
	var calls int64
	for _, cmd := range redistest.ScriptCommands {
		calls += stats[cmd].Calls
	}
	return calls
}

// TestBudgetOptionsErrors checks the errors of bad options and limits.
func TestBudgetOptionsErrors(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	for _, o := range []Options{{DenyCache: -1}, {BudgetIdle: -time.Second}} {
		if _, err := New(c, &o); err == nil {
			t.Errorf("New(%+v) = nil error, want one", o)
		}
	}
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t)})[0]
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA, floodgate.SlidingWindowLog, floodgate.Concurrency} {
		l := floodgate.Limit{Algorithm: alg, Limit: 10, Period: time.Second, LocalBudget: 5}
		if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
			l.LocalBudget = 11 // the buckets take one up to their Limit
		}
		_, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1, Lease: "x"})
		if !errors.Is(err, floodgate.ErrInvalidLimit) || !strings.Contains(err.Error(), "local_budget") {
			t.Errorf("%s with a local budget: %v, want an invalid limit naming local_budget", alg, err)
		}
	}
}

// TestBudgetGiveBackCountRejected checks that a fixed window filled by a
// counted rejection takes no units back: it stays denied until its end.
func TestBudgetGiveBackCountRejected(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	clock := floodgatetest.NewFakeClock(t0)
	l := floodgate.Limit{Limit: 10, Period: time.Minute, CountRejected: true, LocalBudget: 8}
	stores := newInstances(t, addr, 2, Options{Prefix: testPrefix(t), Clock: clock})
	noSweeper(stores[0])
	// The first claim takes nothing extra, the second 1 unit, which the
	// third spends; the fourth claims 2.
	for range 4 {
		if d, err := stores[0].Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("Apply = %+v, %v", d, err)
		}
	}
	key := stores[0].Key("k", l)
	if n := redisCount(t, c, key); n <= 4 {
		t.Fatalf("count %d after 4 admitted, want claimed units on top", n)
	}
	if d, err := stores[1].Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 10}); err != nil || d.Allowed {
		t.Fatalf("Apply(cost 10) = %+v, %v; want denied", d, err)
	}
	if n := redisCount(t, c, key); n != 11 {
		t.Fatalf("count %d after a counted rejection, want 11", n)
	}
	if err := stores[0].Close(); err != nil {
		t.Fatal(err)
	}
	if n := redisCount(t, c, key); n != 11 {
		t.Errorf("count %d after Close, want 11 (nothing given back)", n)
	}
}

// seedScenario has 30 goroutines, spread over stores, each take one unit of
// key "seed" under l until denied (at most 1000 each), and returns how many
// were admitted.
func seedScenario(t *testing.T, stores []*Store, l floodgate.Limit) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 30 {
		wg.Go(func() {
			for range 1000 {
				d, err := stores[g%len(stores)].Apply(t.Context(), floodgate.Request{Key: "seed", Limit: l, Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					return
				}
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	return admitted.Load()
}
