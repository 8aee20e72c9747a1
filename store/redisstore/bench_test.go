package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkAllow decides one unit per operation against a local
// redis-server, with the server's clock: every algorithm, over one hot key
// or 100k keys (visited in turn, made before timing), by 1, 16, 64 or 256
// concurrent callers sharing one rueidis client, through EVALSHA
// (call=evalsha) and through functions (call=fcall, Options.Functions). It
// reports decisions/s, roundtrips/op (the scripts the server ran per
// decision: EVALSHA, EVAL and FCALL calls from INFO commandstats, each one request and one reply, pipelined
// with the other callers' or not) and server-µs/op (the time Redis spent
// running them, which a loaded machine disturbs less than wall time).
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	s, err := New(c, &Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	sf, err := New(c, &Options{Prefix: "bench", Functions: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store=redis", func(b *testing.B) {
		for _, alg := range floodgate.Algorithms {
			b.Run("alg="+string(alg), func(b *testing.B) {
				l := benchLimit(alg)
				for _, n := range []int{1, 100_000} {
					b.Run("keys="+benchCount(n), func(b *testing.B) {
						keys := benchKeys(n)
						warm(b, s, l, keys)
						warm(b, sf, l, keys)
						for _, callers := range []int{1, 16, 64, 256} {
							for _, call := range []string{"evalsha", "fcall"} {
								st := s
								if call == "fcall" {
									st = sf
								}
								b.Run(fmt.Sprintf("callers=%d/call=%s", callers, call), func(b *testing.B) {
									runCallers(b, c, callers, func(i int, lease string) {
										benchOp(st, l, keys[i%len(keys)], lease, i)
									})
								})
							}
						}
					})
				}
			})
		}
	})
}

// runCallers runs op b.N times in all from the given number of goroutines,
// and reports decisions/s and roundtrips/op.
func runCallers(b *testing.B, c rueidis.Client, callers int, op func(i int, lease string)) {
	b.ReportAllocs()
	before, beforeUsec := scriptStats(b, c)
	cpu0 := serverCPU(b, c)
	if callers == 1 {
		lease := fmt.Sprint("g", benchLeases.Add(1))
		i := 0
		for b.Loop() {
			op(i, lease)
			i++
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			id := benchLeases.Add(1)
			lease := fmt.Sprint("g", id)
			i := int(id) * 7919 // callers start on different keys
			for pb.Next() {
				op(i, lease)
				i++
			}
		})
	}
	b.StopTimer()
	calls, usec := scriptStats(b, c)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(calls-before)/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(usec-beforeUsec)/float64(b.N), "server-µs/op")
	b.ReportMetric((serverCPU(b, c)-cpu0)*1e6/float64(b.N), "server-cpu-µs/op")
}

// commandStats is the server's INFO commandstats (redistest.ParseCommandStats).
func commandStats(t testing.TB, c rueidis.Client) map[string]redistest.CommandStat {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return redistest.ParseCommandStats(info)
}

// scriptStats is the number of scripts the server has run (EVALSHA, EVAL
// and FCALL calls, from INFO commandstats; the commands a script runs inside are
// counted under their own names and are not round trips) and the
// microseconds it spent in them.
func scriptStats(b *testing.B, c rueidis.Client) (calls, usec int64) {
	stats := commandStats(b, c)
	for _, cmd := range redistest.ScriptCommands {
		calls += stats[cmd].Calls
		usec += stats[cmd].Usec
	}
	return calls, usec
}

// benchLimit is a limit that admits most of what the benchmark sends; the
// log and concurrency algorithms keep one entry per unit, so their limit is
// smaller.
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
	benchKeyList  []string
	benchLeases   atomic.Int64
)

func benchKeys(n int) []string {
	benchKeysOnce.Do(func() {
		benchKeyList = make([]string, 100_000)
		for i := range benchKeyList {
			benchKeyList[i] = "user:" + strconv.Itoa(i)
		}
	})
	return benchKeyList[:n]
}

func benchCount(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// warm makes the state of every key before timing, from 64 goroutines.
func warm(b *testing.B, s *Store, l floodgate.Limit, keys []string) {
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 64 {
				benchOp(s, l, keys[i], "warm", 2*i)
			}
		})
	}
	wg.Wait()
}

// benchOp is one decision on key: cost 1, or for Concurrency, acquiring and
// releasing the caller's lease in turn.
func benchOp(s *Store, l floodgate.Limit, key, lease string, i int) {
	r := floodgate.Request{Key: key, Limit: l, Cost: 1}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease, r.Release = lease, i%2 == 1
	}
	if _, err := s.Apply(context.Background(), r); err != nil {
		panic(err)
	}
}

// BenchmarkScriptCost measures what each algorithm's script costs Redis:
// redis-benchmark (which must be on PATH) runs EVALSHA of the script
// floodgate loads from 16 connections with 16-deep pipelines, with one
// unit per call on the server's clock, over one hot key or keys spread
// over 100k with __rand_int__. It reports usec/call, usec_per_call of
// cmdstat_evalsha (INFO commandstats: the time Redis spent inside the
// script, wall time, so a busy machine inflates it) and cpu-usec/call,
// the CPU time redis-server used per call (INFO cpu: it also counts reading
// the commands and writing the replies, but not time the process waited
// for a core). alg=bare is a reference script that does only what any
// fixed window decision must (TIME, GET, SET PX, a reply of six integers)
// and alg=noop one that only replies. Run it with a fixed count, e.g.
// -benchtime 100000x.
func BenchmarkScriptCost(b *testing.B) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		b.Skip("redis-benchmark is not on PATH")
	}
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	host, port, _ := net.SplitHostPort(srv.Addr)
	type target struct {
		name string
		sc   *script
		args []string
	}
	if err := c.Do(context.Background(), c.B().FunctionLoad().Replace().FunctionCode(scripts.lib.src).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	var targets []target
	for _, alg := range floodgate.Algorithms {
		r := floodgate.Request{Key: "k", Limit: benchLimit(alg), Cost: 1}
		if alg == floodgate.Concurrency {
			r.Lease = "l__rand_int__" // a lease per call: each acquires one unit
		}
		args := appendRequest(nil, &r, alg, -1)
		if alg == floodgate.SlidingWindowLog {
			args[6] = "i__rand_int__"
		}
		targets = append(targets, target{string(alg), scripts.single[alg], args})
	}
	targets = append(targets,
		target{"bare", newScript("bare", `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('GET', KEYS[1])
local n = 1
if v then n = tonumber(v) + 1 end
redis.call('SET', KEYS[1], n, 'PX', 1000)
return {1, 1000000, 1000000 - n, 1000000, 0, now}
`), nil},
		target{"noop", newScript("noop", "return {1, 0, 0, 0, 0, 1}"), nil})
	for _, tg := range targets {
		if err := c.Do(context.Background(), c.B().ScriptLoad().Script(tg.sc.src).Build()).Error(); err != nil {
			b.Fatal(err)
		}
		for _, keys := range []int{1, 100_000} {
			for _, call := range []string{"evalsha", "fcall"} {
				if call == "fcall" && tg.sc.fn == "" {
					continue // bare and noop are not in the library
				}
				b.Run(fmt.Sprintf("alg=%s/keys=%s/call=%s", tg.name, benchCount(keys), call), func(b *testing.B) {
					key := "bench:{hot}"
					if keys > 1 {
						key = "bench:{user:__rand_int__}"
					}
					for _, cmd := range []rueidis.Completed{c.B().Flushall().Build(), c.B().ConfigResetstat().Build()} {
						if err := c.Do(context.Background(), cmd).Error(); err != nil {
							b.Fatal(err)
						}
					}
					// A whole number of pipelines, at least 16 per connection
					// (see runCeiling in bench/redis_test.go).
					const batch = 16 * 16
					n := (max(b.N, 16*batch) + batch - 1) / batch * batch
					name := tg.sc.sha
					if call == "fcall" {
						name = tg.sc.fn
					}
					cmd := exec.Command("redis-benchmark", append([]string{"-h", host, "-p", port,
						"-c", "16", "-P", "16", "-n", strconv.Itoa(n), "-r", strconv.Itoa(keys), "-q",
						// Options end at the first command word.
						call, name, "1", key}, tg.args...)...)
					cpu0 := serverCPU(b, c)
					b.ResetTimer()
					out, err := cmd.CombinedOutput()
					b.StopTimer()
					if err != nil {
						b.Fatalf("redis-benchmark: %v\n%s", err, out)
					}
					cpu1 := serverCPU(b, c)
					calls, usec := scriptStats(b, c)
					if calls != int64(n) {
						b.Fatalf("%d %s calls, want %d\n%s", calls, call, n, out)
					}
					info, err := c.Do(context.Background(), c.B().Info().Section("errorstats").Build()).ToString()
					if err != nil {
						b.Fatal(err)
					}
					if strings.Contains(info, "errorstat_") {
						b.Fatalf("the script failed: %s", info)
					}
					b.ReportMetric(float64(usec)/float64(calls), "usec/call")
					b.ReportMetric((cpu1-cpu0)*1e6/float64(calls), "cpu-usec/call")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
}

// serverCPU is the CPU time redis-server has used, in seconds.
func serverCPU(b *testing.B, c rueidis.Client) float64 {
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return sec
}

// BenchmarkWait measures what Options.WaitReplicas costs on a master with
// one replica (both on this machine): fixed_window on 100k keys and on one
// hot key, by 1 to 256 callers, without WAIT (wait=0) and with a WAIT for
// the replica after every script run (wait=1). Coalescing is on, as by
// default, so a WAIT covers every decision of a shared run. failed/op is
// the share of calls that failed with ErrNotReplicated: the replica did
// not acknowledge within the default WaitTimeout (50 ms), which on a
// saturated machine, where the replica waits for a core, happens.
func BenchmarkWait(b *testing.B) {
	master := redistest.Standalone(b)
	redistest.Replica(b, master)
	c := newRueidis(b, master.Addr)
	l := benchLimit(floodgate.FixedWindow)
	for _, replicas := range []int{0, 1} {
		s, err := New(c, &Options{Prefix: "bench", WaitReplicas: replicas})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("wait=%d", replicas), func(b *testing.B) {
			for _, n := range []int{1, 100_000} {
				keys := benchKeys(n)
				warm(b, s, l, keys)
				for _, callers := range []int{1, 16, 64, 256} {
					b.Run(fmt.Sprintf("keys=%s/callers=%d", benchCount(n), callers), func(b *testing.B) {
						var failed atomic.Int64
						runCallers(b, c, callers, func(i int, _ string) {
							_, err := s.Apply(context.Background(), floodgate.Request{Key: keys[i%len(keys)], Limit: l, Cost: 1})
							switch {
							case errors.Is(err, ErrNotReplicated):
								failed.Add(1)
							case err != nil:
								panic(err)
							}
						})
						b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
					})
				}
			}
		})
	}
}

// BenchmarkReserveCallers measures a reservation's two steps beside one
// decision on the same Redis, with many callers (BenchmarkReserve has one): op=allow is one Apply; op=reserve+commit reserves 4
// units and commits 1, two script runs and a hold kept for its retention,
// counted as one operation (decisions/s are then pairs per second). 10k
// keys, 1 and 64 callers, EVALSHA.
func BenchmarkReserveCallers(b *testing.B) {
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	s, err := New(c, &Options{Prefix: "benchres", HoldSweep: -1})
	if err != nil {
		b.Fatal(err)
	}
	keys := benchKeys(10_000)
	var ids atomic.Int64
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.GCRA} {
		l := benchLimit(alg)
		for _, callers := range []int{1, 64} {
			for _, op := range []string{"allow", "reserve+commit"} {
				b.Run(fmt.Sprintf("alg=%s/callers=%d/op=%s", alg, callers, op), func(b *testing.B) {
					runCallers(b, c, callers, func(i int, _ string) {
						key := keys[i%len(keys)]
						if op == "allow" {
							if _, err := s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1}); err != nil {
								b.Error(err)
							}
							return
						}
						id := "b" + strconv.FormatInt(ids.Add(1), 36)
						if _, err := s.Reserve(ctx, floodgate.HoldRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 4}}, ID: id, TTL: time.Minute}); err != nil {
							b.Error(err)
							return
						}
						if _, err := s.Settle(ctx, floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l}}, ID: id, Actual: 1}); err != nil {
							b.Error(err)
						}
					})
				})
			}
		}
	}
}

// BenchmarkServePath decides one unit per operation the way floodgate
// serve does on Redis: a Store opened from a URL (the client settings of
// clientOption), wrapped by WithTimeout(1s) as a Limiter wraps it, each
// call under a context of its own with a deadline of 1 s (gRPC's
// grpc-timeout), fixed_window over 100k keys, by 64 concurrent callers,
// coalescing as by default. Besides allocs/op it reports
// client-cpu-µs/op, this process's user and system CPU per decision (the
// store's client side, the part of serve's CPU that Redis adds),
// goroutines/op, the goroutines started per decision, and the server's
// CPU and scripts per decision, as BenchmarkAllow does.
func BenchmarkServePath(b *testing.B) {
	srv := redistest.Standalone(b)
	ctx := context.Background()
	s, err := Open(ctx, "redis://"+srv.Addr, &Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	st := s.WithTimeout(time.Second)
	l := benchLimit(floodgate.FixedWindow)
	keys := benchKeys(100_000)
	warm(b, s, l, keys)
	c := newRueidis(b, srv.Addr)
	for _, callers := range []int{16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			cpu0, g0 := processCPU(b), goroutinesCreated()
			runCallers(b, c, callers, func(i int, _ string) {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := st.Apply(cctx, floodgate.Request{Key: keys[i%len(keys)], Limit: l, Cost: 1})
				cancel()
				if err != nil {
					panic(err)
				}
			})
			b.ReportMetric((processCPU(b)-cpu0)*1e6/float64(b.N), "client-cpu-µs/op")
			b.ReportMetric(float64(goroutinesCreated()-g0)/float64(b.N), "goroutines/op")
		})
	}
}

// goroutinesCreated is the number of goroutines this process has started.
func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// processCPU is this process's user and system CPU time so far, in
// seconds.
func processCPU(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
