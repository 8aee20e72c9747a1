package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// benchLimit is a limit of alg that a benchmark can hit as fast as it
// likes: the O(1) algorithms admit a million per second (a hot key is
// denied part of the time, which costs the same); sliding_window_log and
// concurrency keep one entry per unit, so their limit is what their memory
// allows.
func benchLimit(alg floodgate.Algorithm) floodgate.Limit {
	switch alg {
	case floodgate.SlidingWindowLog:
		return floodgate.Limit{Algorithm: alg, Limit: 1000, Period: time.Second}
	case floodgate.Concurrency:
		return floodgate.Limit{Algorithm: alg, Limit: 1000, Period: time.Minute}
	}
	return floodgate.Limit{Algorithm: alg, Limit: 1_000_000, Period: time.Second}
}

var (
	benchKeysOnce sync.Once
	benchKeys     []string // "user:0" … "user:999999"
)

// keysFor returns the first n of a million key names, made once.
func keysFor(n int) []string {
	benchKeysOnce.Do(func() {
		benchKeys = make([]string, 1_000_000)
		for i := range benchKeys {
			benchKeys[i] = fmt.Sprintf("user:%d", i)
		}
	})
	return benchKeys[:n]
}

// benchOp is one decision on keys[i]: Apply with cost 1, or for
// Concurrency, acquiring and releasing a lease of the goroutine's in turn.
func benchOp(ctx context.Context, s *memstore.Store, l floodgate.Limit, key, lease string, i int) {
	r := floodgate.Request{Key: key, Limit: l, Cost: 1}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease, r.Release = lease, i%2 == 1
	}
	if _, err := s.Apply(ctx, r); err != nil {
		panic(err)
	}
}

var leaseIDs atomic.Int64

// BenchmarkAllow decides one unit per operation on existing keys, visited
// in turn: alg × keys (1, 10k, 1M, each made before timing) × par (1: a
// loop on one goroutine; GOMAXPROCS: b.RunParallel; 64: b.SetParallelism
// for 64 goroutines in all). Besides ns/op it reports cpu-ns/op, the CPU
// time of the process per operation (see cpuTime).
func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	pars := []int{1, runtime.GOMAXPROCS(0), 64}
	for _, alg := range floodgate.Algorithms {
		b.Run("alg="+string(alg), func(b *testing.B) {
			l := benchLimit(alg)
			for _, n := range []int{1, 10_000, 1_000_000} {
				b.Run("keys="+count(n), func(b *testing.B) {
					keys := keysFor(n)
					s := memstore.New(&memstore.Options{SweepInterval: -1})
					defer s.Close()
					for i, k := range keys {
						benchOp(ctx, s, l, k, "warm", 2*i) // acquires for Concurrency
					}
					for _, par := range pars {
						b.Run(fmt.Sprintf("par=%d", par), func(b *testing.B) {
							b.ReportAllocs()
							start, _ := cpuTime()
							defer func() { reportCPU(b, start) }()
							if par == 1 {
								lease := fmt.Sprint("g", leaseIDs.Add(1))
								i := 0
								for b.Loop() {
									benchOp(ctx, s, l, keys[i%len(keys)], lease, i)
									i++
								}
								return
							}
							b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
							b.RunParallel(func(pb *testing.PB) {
								id := leaseIDs.Add(1)
								lease := fmt.Sprint("g", id)
								i := int(id) * 7919 // goroutines start on different keys
								for pb.Next() {
									benchOp(ctx, s, l, keys[i%len(keys)], lease, i)
									i++
								}
							})
						})
					}
				})
			}
		})
	}
}

// BenchmarkMemoryPerKey inserts a million keys into a new store and reports
// the heap they take, per key (B/key), without the bytes of the key
// strings themselves, which the caller allocated. units=10 holds ten units
// per key (ten log entries, ten one-unit leases), to show the cost per
// unit of the O(limit) algorithms. Run it with -benchtime=1x.
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	const n = 1_000_000
	keys := keysFor(n)
	leases := make([]string, 10)
	for i := range leases {
		leases[i] = fmt.Sprintf("%032x", i) // as long as Limiter.Acquire's IDs
	}
	type variant struct {
		alg   floodgate.Algorithm
		units int
	}
	var variants []variant
	for _, alg := range floodgate.Algorithms {
		variants = append(variants, variant{alg, 1})
		if alg == floodgate.SlidingWindowLog || alg == floodgate.Concurrency {
			variants = append(variants, variant{alg, 10})
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, v := range variants {
		name := "alg=" + string(v.alg)
		if v.units > 1 {
			name += fmt.Sprintf("/units=%d", v.units)
		}
		b.Run(name, func(b *testing.B) {
			l := benchLimit(v.alg)
			l.Period = time.Hour // nothing expires while it runs
			var perKey float64
			for b.Loop() {
				before := heap()
				s := memstore.New(&memstore.Options{SweepInterval: -1})
				for _, k := range keys {
					for u := range v.units {
						r := floodgate.Request{Key: k, Limit: l, Cost: 1}
						if v.alg == floodgate.Concurrency {
							r.Lease = leases[u]
						}
						if _, err := s.Apply(ctx, r); err != nil {
							b.Fatal(err)
						}
					}
				}
				if got := s.Len(); got != n {
					b.Fatalf("Len = %d, want %d", got, n)
				}
				perKey = float64(heap()-before) / n
				runtime.KeepAlive(s)
				s.Close()
			}
			b.ReportMetric(perKey, "B/key")
		})
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

// BenchmarkReserve measures a reservation's two steps beside a plain
// decision, on 10k keys visited in turn, one goroutine: op=allow is one
// Apply; op=reserve+commit is a Reserve of 4 units and a Commit of 1 (two
// atomic steps and a hold kept for its retention), reported per pair.
// Compare the two with benchstat; the ratio is the price of settling the
// actual cost exactly once.
func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	keys := keysFor(10_000)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.GCRA} {
		l := benchLimit(alg)
		for _, op := range []string{"allow", "reserve+commit"} {
			b.Run(fmt.Sprintf("alg=%s/op=%s", alg, op), func(b *testing.B) {
				s := memstore.New(&memstore.Options{SweepInterval: -1})
				defer s.Close()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					key := keys[i%len(keys)]
					i++
					if op == "allow" {
						if _, err := s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1}); err != nil {
							b.Fatal(err)
						}
						continue
					}
					id := fmt.Sprintf("r%d", i)
					if _, err := s.Reserve(ctx, floodgate.HoldRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 4}}, ID: id, TTL: time.Minute}); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Settle(ctx, floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l}}, ID: id, Actual: 1}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMaxKeysFill fills a store of 128 shards (the default on 2
// CPUs) with MaxKeys 1,000,000 by new keys until the first ErrFull, and
// reports the share of MaxKeys held then (fill_%): how early the per-shard
// cap starts refusing with uniform keys.
func BenchmarkMaxKeysFill(b *testing.B) {
	const maxKeys = 1_000_000
	l := floodgate.Limit{Limit: 10, Period: time.Hour}
	var sum float64
	for b.Loop() {
		s := memstore.New(&memstore.Options{Shards: 128, MaxKeys: maxKeys, SweepInterval: -1})
		n := 0
		for ; n <= maxKeys; n++ {
			if _, err := s.Apply(context.Background(), floodgate.Request{Key: fmt.Sprint("user:", n), Limit: l, Cost: 1}); err != nil {
				break
			}
		}
		s.Close()
		if n > maxKeys {
			b.Fatalf("no ErrFull within %d keys", maxKeys+1)
		}
		sum += float64(n)
	}
	b.ReportMetric(100*sum/float64(b.N)/maxKeys, "fill_%")
}
