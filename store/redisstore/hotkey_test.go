package redisstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// hotKeyResult is what one run of hotKey measured.
type hotKeyResult struct {
	decisions, admitted, denied int64
	calls                       int64 // scripts Redis ran
	heldDenials                 int64 // denials while some instance held unused claimed units
	perWindow                   map[int64]int64
	windows                     []int64 // the window ids, in order
}

// callsPerDecision is Redis script runs per decision.
func (r hotKeyResult) callsPerDecision() float64 {
	return float64(r.calls) / float64(max(r.decisions, 1))
}

// utilisation is the mean of admitted/limit over the windows that the run
// covered whole (all but the first and the last).
func (r hotKeyResult) utilisation(limit int64) (mean, lowest float64) {
	if len(r.windows) < 3 {
		return 0, 0
	}
	lowest = 1e9
	full := r.windows[1 : len(r.windows)-1]
	for _, w := range full {
		u := float64(r.perWindow[w]) / float64(limit)
		mean += u
		lowest = min(lowest, u)
	}
	return mean / float64(len(full)), lowest
}

// heldUnits is the unused claimed units of key under l across stores.
func heldUnits(stores []*Store, key string) int64 {
	var n int64
	for _, s := range stores {
		sh := s.budgets.shards.of(key)
		sh.mu.Lock()
		if e := sh.m[key]; e != nil && s.budgets.clock.now().Before(e.end) {
			n += e.left
		}
		sh.mu.Unlock()
	}
	return n
}

// hotKey runs callers goroutines, spread over the instances, deciding one
// unit of one key of l each, until stop returns true, at the server's
// clock. Every admission is counted in its window, whose id is
// (Now+ResetAfter) in periods, rounded up: the end of the window Redis
// counted it in (for a fixed window; a period later for a sliding one), a
// multiple of the period. A decision made in Redis says it exactly; one
// made from a local budget says it early by the latency of the claim (its
// ResetAfter counts from the local time before the claim was sent), which
// rounding up absorbs up to a whole period.
func hotKey(tb testing.TB, c rueidis.Client, stores []*Store, l floodgate.Limit, key string, callers int, probe bool, stop func(i int64) bool) hotKeyResult {
	var res hotKeyResult
	var mu sync.Mutex
	res.perWindow = make(map[int64]int64)
	before := scriptCalls(tb, c)
	period := l.Period.Microseconds()
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		s := stores[g%len(stores)]
		wg.Go(func() {
			local := make(map[int64]int64)
			var admitted, denied, held int64
			for i := n.Add(1); !stop(i); i = n.Add(1) {
				d, err := s.Apply(context.Background(), floodgate.Request{Key: key, Limit: l, Cost: 1})
				if err != nil {
					tb.Error(err)
					return
				}
				if d.Allowed {
					admitted++
					end := d.Now.Add(d.ResetAfter).UnixMicro()
					local[(end+period-1)/period]++
					continue
				}
				denied++
				if probe && heldUnits(stores, s.Key(key, l)) > 0 {
					held++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.admitted += admitted
			res.denied += denied
			res.heldDenials += held
			for w, k := range local {
				res.perWindow[w] += k
			}
		})
	}
	wg.Wait()
	res.decisions = res.admitted + res.denied
	res.calls = scriptCalls(tb, c) - before
	for w := range res.perWindow {
		res.windows = append(res.windows, w)
	}
	sort.Slice(res.windows, func(i, j int) bool { return res.windows[i] < res.windows[j] })
	return res
}

// hotKeyModes are the store configurations compared.
var hotKeyModes = []struct {
	name      string
	budget    int64 // Limit.LocalBudget
	denyCache int
}{
	{"plain", 0, 0},
	{"denycache", 0, 1000},
	{"budget", 20, 0},
	{"budget+denycache", 20, 1000},
}

// hotKeyLoads are the limits of the hot key: "over", 400 per 200 ms
// (2000/s), under what even the plain store decides on this machine, so
// most decisions are denials; "under", 10 million per 200 ms, which the
// load never reaches, so every decision is admitted.
var hotKeyLoads = []string{"over", "under"}

// hotKeyLimit is the limit of the hot key under load, with the mode's
// LocalBudget.
func hotKeyLimit(alg floodgate.Algorithm, load string, budget int64) floodgate.Limit {
	l := floodgate.Limit{Algorithm: alg, Limit: 400, Period: 200 * time.Millisecond, LocalBudget: budget}
	if load == "under" {
		l.Limit = 10_000_000
	}
	return l
}

// TestBudgetHotKey is issue 7's measure of local budgets: three instances (three
// clients), thirty goroutines hammering one key (hotKeyLimit: far over its
// limit, or under it; aligned windows, the server's clock) for a second
// per mode.
// It asserts that no window ever admits more than the limit, whatever the
// mode, and logs Redis script runs per decision, the utilisation
// (admitted/limit per whole window) and the denials made while another
// instance held unused claimed units. FLOODGATE_HOTKEY_SECONDS sets the
// duration of each run; -short skips it.
func TestBudgetHotKey(t *testing.T) {
	if testing.Short() {
		t.Skip("a second per load, mode and algorithm; run without -short")
	}
	dur := time.Second
	if v := os.Getenv("FLOODGATE_HOTKEY_SECONDS"); v != "" {
		var secs float64
		if _, err := fmt.Sscan(v, &secs); err != nil || secs <= 0 {
			t.Fatalf("FLOODGATE_HOTKEY_SECONDS=%q: want a positive number", v)
		}
		dur = time.Duration(secs * float64(time.Second))
	}
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		for _, load := range hotKeyLoads {
			for _, m := range hotKeyModes {
				t.Run(string(alg)+"/"+load+"/"+m.name, func(t *testing.T) {
					l := hotKeyLimit(alg, load, m.budget)
					stores := newInstances(t, addr, 3, Options{Prefix: testPrefix(t), DenyCache: m.denyCache})
					// Load the scripts first.
					for _, s := range stores {
						if _, err := s.Apply(t.Context(), floodgate.Request{Key: "warm", Limit: l, Cost: 1}); err != nil {
							t.Fatal(err)
						}
					}
					deadline := time.Now().Add(dur)
					res := hotKey(t, c, stores, l, "hot", 30, m.budget > 0, func(i int64) bool {
						return i%64 == 0 && time.Now().After(deadline) || i > 50_000_000
					})
					for w, n := range res.perWindow {
						if n > l.Limit {
							t.Errorf("window %d admitted %d, above the limit %d", w, n, l.Limit)
						}
					}
					mean, lowest := res.utilisation(l.Limit)
					if os.Getenv("FLOODGATE_HOTKEY_WINDOWS") != "" {
						for _, w := range res.windows {
							t.Logf("window %d: %d", w, res.perWindow[w])
						}
					}
					t.Logf("%s %s %s: %d decisions (%.0f/s), %d admitted, %.4f script runs per decision, utilisation %.3f (lowest window %.3f) over %d windows, %d denials while units were held elsewhere (%.2f%% of denials)",
						alg, load, m.name, res.decisions, float64(res.decisions)/dur.Seconds(), res.admitted, res.callsPerDecision(), mean, lowest, len(res.windows),
						res.heldDenials, 100*float64(res.heldDenials)/float64(max(res.denied, 1)))
				})
			}
		}
	}
}

// BenchmarkBudgetHotKey decides one unit per operation of one hot key
// (hotKeyLimit, over and under its limit) from three instances, each a
// store over its own client, 30 goroutines in all, with and without
// local budgets. It reports decisions/s, redis-calls/op (scripts Redis ran per
// decision), the utilisation (admitted/limit per whole window) and
// held-denials/op (denials while some instance held unused claimed units).
func BenchmarkBudgetHotKey(b *testing.B) {
	benchHotKey(b, []string{"plain", "budget", "budget+denycache"})
}

// BenchmarkDenyCacheHotKey is BenchmarkBudgetHotKey with and without the
// deny cache, no local budgets.
func BenchmarkDenyCacheHotKey(b *testing.B) {
	benchHotKey(b, []string{"plain", "denycache"})
}

func benchHotKey(b *testing.B, modes []string) {
	srv := standaloneAddr(b)
	c := newRueidis(b, srv)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		for _, load := range hotKeyLoads {
			for _, m := range hotKeyModes {
				if !slices.Contains(modes, m.name) {
					continue
				}
				b.Run("alg="+string(alg)+"/load="+load+"/mode="+m.name, func(b *testing.B) {
					l := hotKeyLimit(alg, load, m.budget)
					stores := newInstances(b, srv, 3, Options{Prefix: testPrefix(b), DenyCache: m.denyCache})
					for _, s := range stores {
						if _, err := s.Apply(context.Background(), floodgate.Request{Key: "warm", Limit: l, Cost: 1}); err != nil {
							b.Fatal(err)
						}
					}
					b.ResetTimer()
					start := time.Now()
					res := hotKey(b, c, stores, l, "hot", 30, m.budget > 0, func(i int64) bool { return i > int64(b.N) })
					elapsed := time.Since(start)
					b.StopTimer()
					for w, n := range res.perWindow {
						if n > l.Limit {
							b.Errorf("window %d admitted %d, above the limit %d", w, n, l.Limit)
						}
					}
					mean, _ := res.utilisation(l.Limit)
					b.ReportMetric(float64(res.decisions)/elapsed.Seconds(), "decisions/s")
					b.ReportMetric(res.callsPerDecision(), "redis-calls/op")
					b.ReportMetric(mean, "utilisation")
					b.ReportMetric(float64(res.heldDenials)/float64(max(res.decisions, 1)), "held-denials/op")
				})
			}
		}
	}
}
