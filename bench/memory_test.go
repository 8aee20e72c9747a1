// Package bench compares floodgate's memory store with other Go rate
// limiters, side by side in one run. It is a module of its own so that the
// peers never become dependencies of floodgate's users.
//
//	cd bench && go test -run '^$' -bench BenchmarkPeers -benchmem -count 3 -benchtime=200ms .
//	cd bench && go test -run '^$' -bench BenchmarkScaling -benchmem -count 3 -benchtime=1s -cpu 1,2 .
//	cd bench && go test -run '^$' -bench BenchmarkCallers -benchmem -count 6 -benchtime=300ms .
//
// bench/results/history.md has the figures and how to read them.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// An outcome is a load every library gets the same way: a rate so high that
// nothing is ever denied, or one unit per hour, so that all but the first
// request of each key are denied.
type outcome struct {
	name     string
	perSec   float64 // the rate, for x/time/rate
	tokens   uint64  // per interval, for go-limiter
	interval time.Duration
	limit    floodgate.Limit // Algorithm filled in per library
}

var outcomes = []outcome{
	// A billion per second admits more than any benchmark can ask. The burst
	// of the buckets is 4 million, the most floodgate allows at that rate
	// (burst × limit ≤ 2^52).
	{"allowed", 1e9, 1e9, time.Second, floodgate.Limit{Limit: 1e9, Period: time.Second, Burst: 4_000_000}},
	{"denied", 1.0 / 3600, 1, time.Hour, floodgate.Limit{Limit: 1, Period: time.Hour}},
}

// A lib answers "may key take one unit?". Each is made per benchmark, with
// every key already seen once, so the benchmark measures the decision on an
// existing key, not the first insertion.
type lib struct {
	name string
	make func(tb testing.TB, o outcome, keys []string) func(ctx context.Context, key string) bool
}

var libs = []lib{
	{"floodgate-gcra-limiter", floodgateLimiter(floodgate.GCRA)},
	{"floodgate-gcra-store", floodgateStore(floodgate.GCRA)},
	{"floodgate-token_bucket-limiter", floodgateLimiter(floodgate.TokenBucket)},
	{"floodgate-token_bucket-store", floodgateStore(floodgate.TokenBucket)},
	{"x-time-rate-one", xTimeRateOne},
	{"x-time-rate", xTimeRate},
	{"x-time-rate-mutex-map", xTimeRateMutexMap},
	{"x-time-rate-sync-map", xTimeRateSyncMap},
	{"go-limiter", goLimiter},
}

func newMemstore(tb testing.TB) *memstore.Store {
	s := memstore.New(nil)
	tb.Cleanup(func() { s.Close() })
	return s
}

// floodgateLimiter decides through floodgate.Limiter.Allow, what most
// callers use: it validates the limit and builds the Request.
func floodgateLimiter(alg floodgate.Algorithm) func(testing.TB, outcome, []string) func(context.Context, string) bool {
	return func(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
		l := o.limit
		l.Algorithm = alg
		lim, err := floodgate.New(newMemstore(tb), nil)
		if err != nil {
			tb.Fatal(err)
		}
		allow := func(ctx context.Context, key string) bool {
			d, err := lim.Allow(ctx, key, l)
			return err == nil && d.Allowed
		}
		for _, k := range keys {
			allow(context.Background(), k)
		}
		return allow
	}
}

// floodgateStore calls Store.Apply directly, as a store's own caller
// would.
func floodgateStore(alg floodgate.Algorithm) func(testing.TB, outcome, []string) func(context.Context, string) bool {
	return func(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
		l := o.limit
		l.Algorithm = alg
		s := newMemstore(tb)
		allow := func(ctx context.Context, key string) bool {
			d, err := s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1})
			return err == nil && d.Allowed
		}
		for _, k := range keys {
			allow(context.Background(), k)
		}
		return allow
	}
}

// xTimeRate keeps one rate.Limiter per key. x/time/rate has no notion of
// keys, so the limiters are made up front and looked up in a map that is
// only read while the benchmark runs: no lock and no insertion, which
// flatters it against the stores that can take new keys at any time.
func xTimeRate(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
	burst := xTimeRateBurst(o)
	m := make(map[string]*rate.Limiter, len(keys))
	for _, k := range keys {
		m[k] = rate.NewLimiter(rate.Limit(o.perSec), burst)
		m[k].Allow()
	}
	return func(_ context.Context, key string) bool { return m[key].Allow() }
}

// xTimeRateOne is x/time/rate as its own benchmarks use it: one
// rate.Limiter, Allow(), no key at all. It ignores the key, so it is the
// same load as the others only with keys=1.
func xTimeRateOne(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
	l := rate.NewLimiter(rate.Limit(o.perSec), xTimeRateBurst(o))
	for range keys {
		l.Allow()
	}
	return func(context.Context, string) bool { return l.Allow() }
}

// xTimeRateBurst is the burst of a rate.Limiter for o: floodgate's
// capacity, at most 4 million.
func xTimeRateBurst(o outcome) int {
	if o.limit.Burst == 0 {
		return int(o.limit.Limit)
	}
	return int(min(o.limit.Capacity(), 4_000_000))
}

// xTimeRateMutexMap is what a caller of x/time/rate writes to limit by key:
// a map of limiters under one mutex, a limiter made on a key's first
// request. Like xTimeRate it never forgets a key (memory grows with every
// key ever seen), which the stores do.
func xTimeRateMutexMap(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	burst := xTimeRateBurst(o)
	allow := func(_ context.Context, key string) bool {
		mu.Lock()
		l, ok := m[key]
		if !ok {
			l = rate.NewLimiter(rate.Limit(o.perSec), burst)
			m[key] = l
		}
		mu.Unlock()
		return l.Allow()
	}
	for _, k := range keys {
		allow(context.Background(), k)
	}
	return allow
}

// xTimeRateSyncMap is the same with a sync.Map, which readers share
// without a lock once a key is in it.
func xTimeRateSyncMap(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
	var m sync.Map
	burst := xTimeRateBurst(o)
	allow := func(_ context.Context, key string) bool {
		v, ok := m.Load(key)
		if !ok {
			v, _ = m.LoadOrStore(key, rate.NewLimiter(rate.Limit(o.perSec), burst))
		}
		return v.(*rate.Limiter).Allow()
	}
	for _, k := range keys {
		allow(context.Background(), k)
	}
	return allow
}

// goLimiter is github.com/sethvargo/go-limiter's memorystore: a map under
// a read-write lock, a mutex per bucket, and a clock that ticks per
// interval (its buckets refill in steps of a whole interval).
func goLimiter(tb testing.TB, o outcome, keys []string) func(context.Context, string) bool {
	s, err := memorystore.New(&memorystore.Config{Tokens: o.tokens, Interval: o.interval})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	var st limiter.Store = s
	allow := func(ctx context.Context, key string) bool {
		_, _, _, ok, err := st.Take(ctx, key)
		return err == nil && ok
	}
	for _, k := range keys {
		allow(context.Background(), k)
	}
	return allow
}

func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	return keys
}

// BenchmarkPeers decides one unit per operation on an existing key:
// outcome × keys (1 or 10k, visited in turn) × par (1: a loop on one
// goroutine; GOMAXPROCS: b.RunParallel) × lib. Besides ns/op it reports
// cpu-ns/op, the CPU time of the process per operation (see cpuTime).
func BenchmarkPeers(b *testing.B) {
	ctx := context.Background()
	for _, o := range outcomes {
		b.Run("outcome="+o.name, func(b *testing.B) {
			for _, nkeys := range []int{1, 10_000} {
				keys := keyNames(nkeys)
				b.Run(fmt.Sprintf("keys=%s", count(nkeys)), func(b *testing.B) {
					for _, par := range []int{1, runtime.GOMAXPROCS(0)} {
						b.Run(fmt.Sprintf("par=%d", par), func(b *testing.B) {
							for _, l := range libs {
								if l.name == "x-time-rate-one" && nkeys > 1 {
									continue // one limiter is one key
								}
								b.Run("lib="+l.name, func(b *testing.B) {
									allow := l.make(b, o, keys)
									b.ReportAllocs()
									b.ResetTimer() // b.Loop does, b.RunParallel does not
									start, _ := cpuTime()
									defer func() { reportCPU(b, start) }()
									if par == 1 {
										i := 0
										for b.Loop() {
											allow(ctx, keys[i])
											if i++; i == len(keys) {
												i = 0
											}
										}
										return
									}
									b.RunParallel(func(pb *testing.PB) {
										i := 0
										for pb.Next() {
											allow(ctx, keys[i])
											if i++; i == len(keys) {
												i = 0
											}
										}
									})
								})
							}
						})
					}
				})
			}
		})
	}
}

// scalingLibs are the libraries BenchmarkScaling runs: the stores that take
// any key at any time, and x/time/rate's read-only map as a ceiling.
var scalingLibs = []string{"floodgate-gcra-store", "floodgate-gcra-limiter", "x-time-rate", "x-time-rate-mutex-map", "x-time-rate-sync-map", "go-limiter"}

// BenchmarkScaling decides one unit per operation on 100k existing keys
// from GOMAXPROCS goroutines (b.RunParallel), each starting at its own
// place in the key list, with nothing denied. Run it with -cpu 1,2: the
// ratio of decisions/s at 2 and at 1 is how it scales across cores (2 when
// nothing is shared; 1 or less when one lock serialises everything).
//
// keys=100k visits the keys in the order they were made, which is the
// order x/time/rate's limiters were allocated in: the processor's
// prefetcher then brings each limiter in before it is needed, which a
// store that spreads its keys over shards by hash does not get.
// keys=100k-shuffled visits them in one fixed random order, as real
// traffic would, at the cost of one more sequential read per operation
// for every library.
func BenchmarkScaling(b *testing.B) {
	ctx := context.Background()
	keys := keyNames(100_000)
	shuffled := slices.Clone(keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	o := outcomes[0]
	for _, order := range []struct {
		name string
		keys []string
	}{{"keys=100k", keys}, {"keys=100k-shuffled", shuffled}} {
		for _, name := range scalingLibs {
			var l lib
			for _, x := range libs {
				if x.name == name {
					l = x
				}
			}
			b.Run(order.name+"/lib="+name, func(b *testing.B) {
				// Made from keys, in their order, whatever the order of
				// the visits.
				allow := l.make(b, o, keys)
				visit := order.keys
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				start, _ := cpuTime()
				defer func() { reportCPU(b, start) }()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1)*7919) % len(visit)
					for pb.Next() {
						allow(ctx, visit[i])
						if i++; i == len(visit) {
							i = 0
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
}

// callersLibs are the libraries BenchmarkCallers runs: floodgate's memory
// store through Limiter.Allow and through Store.Apply, x/time/rate as its
// own benchmarks hold it (one limiter, no key: keys=1 only), behind the
// read-only map (a lookup, no lock) and behind a map under a mutex (what a
// caller writes to limit by key).
var callersLibs = []string{"floodgate-gcra-limiter", "floodgate-gcra-store", "x-time-rate-one", "x-time-rate", "x-time-rate-mutex-map"}

// BenchmarkCallers decides one unit per operation with nothing denied, on
// one hot key or on 100k keys visited in one fixed shuffled order, from 1
// caller (a loop on one goroutine) or 64 (b.RunParallel with
// SetParallelism, 64 goroutines whatever GOMAXPROCS is, each from its own
// place in the key list). It reports cpu-ns/op (see reportCPU) and
// decisions/s.
//
// x/time/rate has no keys: x-time-rate-one holds its one limiter, which
// no caller limiting by key can do; x-time-rate finds the key's limiter
// in a map that is only read (made up front, no lock); floodgate finds
// the key's state in the store (hash, shard lock, lookup) and could take
// new keys at any time. x-time-rate is the fair peer, x-time-rate-one the
// floor.
func BenchmarkCallers(b *testing.B) {
	ctx := context.Background()
	hot := []string{"user:0"}
	many := keyNames(100_000)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(many), func(i, j int) { many[i], many[j] = many[j], many[i] })
	o := outcomes[0]
	for _, keys := range [][]string{hot, many} {
		for _, callers := range []int{1, 64} {
			for _, name := range callersLibs {
				if name == "x-time-rate-one" && len(keys) > 1 {
					continue
				}
				var l lib
				for _, x := range libs {
					if x.name == name {
						l = x
					}
				}
				b.Run(fmt.Sprintf("keys=%s/callers=%d/lib=%s", count(len(keys)), callers, name), func(b *testing.B) {
					allow := l.make(b, o, keys)
					b.ReportAllocs()
					b.ResetTimer()
					start, _ := cpuTime()
					defer func() { reportCPU(b, start) }()
					defer func() { b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s") }()
					if callers == 1 {
						i := 0
						for b.Loop() {
							allow(ctx, keys[i])
							if i++; i == len(keys) {
								i = 0
							}
						}
						return
					}
					var next atomic.Int64
					b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					b.RunParallel(func(pb *testing.PB) {
						i := int(next.Add(1)*7919) % len(keys)
						for pb.Next() {
							allow(ctx, keys[i])
							if i++; i == len(keys) {
								i = 0
							}
						}
					})
				})
			}
		}
	}
}

// TestOutcomes checks that each outcome is what its name says for every
// library, so that the benchmark compares like with like.
func TestOutcomes(t *testing.T) {
	ctx := context.Background()
	keys := []string{"a"}
	for _, o := range outcomes {
		for _, l := range libs {
			t.Run(o.name+"/"+l.name, func(t *testing.T) {
				allow := l.make(t, o, keys) // the first request of "a" is taken here
				allowed := 0
				for range 1000 {
					if allow(ctx, "a") {
						allowed++
					}
				}
				want := map[string]int{"allowed": 1000, "denied": 0}[o.name]
				if allowed != want {
					t.Errorf("%d of 1000 allowed, want %d", allowed, want)
				}
			})
		}
	}
}

// reportCPU reports the CPU time per operation (cpu-ns/op) the process used
// since start, where the system can tell.
func reportCPU(b *testing.B, start time.Duration) {
	if end, ok := cpuTime(); ok && b.N > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
