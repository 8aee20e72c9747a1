package main

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/bench"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

// TestInProcess runs one short row on each in-process library: every call
// is counted and answered, and the per-decision figures are filled in.
func TestInProcess(t *testing.T) {
	keys := bench.Keys(1000)
	for _, lib := range bench.MemLibs {
		allow, closeLib, err := lib.Open(keys)
		if err != nil {
			t.Fatal(err)
		}
		rw, err := inProcess(t.Context(), lib.Name, allow, keys, 4, 300*time.Millisecond, 0, nil)
		closeLib()
		if err != nil {
			t.Fatal(err)
		}
		s := rw.sum
		if s.OK == 0 || s.OK+s.OverLimit != s.Calls || s.Errors != 0 {
			t.Errorf("%s: %+v: want every call answered, most admitted", lib.Name, s)
		}
		if math.IsNaN(rw.allocs) || math.IsNaN(rw.cpuNs) || !math.IsNaN(rw.calls) || !math.IsNaN(rw.redisCPU) {
			t.Errorf("%s: allocs %v cpu-ns %v calls %v redis CPU %v: want the first two only", lib.Name, rw.allocs, rw.cpuNs, rw.calls, rw.redisCPU)
		}
	}
}

// TestVariantRatios checks the hook for store features: a variant named
// base+feature gets its ratios against base.
func TestVariantRatios(t *testing.T) {
	mk := func(lib string, perSec, scripts float64) row {
		return row{lib: lib, keys: 1, callers: 64, scripts: scripts, calls: 4 * scripts,
			sum: loadgen.Summary{DecisionsPerSec: perSec, LatencyMS: loadgen.LatencyMS{P99: 2}}}
	}
	rows := []row{mk("floodgate fixed_window", 1000, 1), mk("floodgate fixed_window+local_budget", 5000, 0.1)}
	var out bytes.Buffer
	ratios(&out, ceilingResult{minP1: 1, minP16: 1, p1: 1, p16: 1, minCPU: [2]float64{1, 1}, cpu: [2]float64{1, 1}}, rows, nil, nil)
	if want := "| fixed_window+local_budget | 1 (hot) | 64 | 10.0 | 10.0 | 5.00 | 1.00 |"; !strings.Contains(out.String(), want) {
		t.Errorf("ratios lack %q:\n%s", want, &out)
	}
	out.Reset()
	ratios(&out, ceilingResult{minP1: 1, minP16: 1, p1: 1, p16: 1, minCPU: [2]float64{1, 1}, cpu: [2]float64{1, 1}}, rows[:1], nil, nil)
	if !strings.Contains(out.String(), "(none in bench.FloodgateVariants)") {
		t.Errorf("no variant, no note:\n%s", &out)
	}
}

func TestProcCPU(t *testing.T) {
	// Burn at least 30ms of CPU (bounded in time) so that the kernel's
	// 10ms ticks show some.
	deadline := time.Now().Add(5 * time.Second)
	for start := selfCPU(); selfCPU()-start < 30*time.Millisecond && time.Now().Before(deadline); {
		for i := 0; i < 1e5; i++ {
			_ = math.Sqrt(float64(i))
		}
	}
	got, err := procCPU(os.Getpid())
	if err != nil || got <= 0 {
		t.Errorf("procCPU(self) = %v, %v; want above zero", got, err)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU(-1): no error")
	}
}

func TestFailedOpen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`# HELP floodgate_decisions_total decisions
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="allowed",rule="bench|user"} 900
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="failed_open",rule="bench|user"} 7
floodgate_decisions_total{algorithm="gcra",domain="bench",outcome="failed_open",rule="bench|x"} 5
`))
	}))
	defer srv.Close()
	if n, err := failedOpen(srv.URL); err != nil || n != 12 {
		t.Errorf("failedOpen = %d, %v; want 12", n, err)
	}
}

// TestParseCeiling reads redis-ceiling.sh's output: four rates and four
// CPU figures, in order, and the fast script's two of each when present.
func TestParseCeiling(t *testing.T) {
	out := `== minimal P1: redis-benchmark ...
evalsha 04 1 min:user:__rand_int__ 60000: 128205.12 requests per second, p50=0.415 msec
redis-cpu-µs/op: 3.90
== minimal P16: ...
evalsha 04 1 min:user:__rand_int__ 60000: 425531.94 requests per second, p50=2.295 msec
redis-cpu-µs/op: 2.15
== fixed_window P1: ...
evalsha 77 1 fw:user:__rand_int__ -1 1000000 60000000 1 0 0 : 93457.95 requests per second, p50=0.703 msec
redis-cpu-µs/op: 10.64
== fixed_window P16: ...
evalsha 77 1 fw:user:__rand_int__ -1 1000000 60000000 1 0 0 : 118343.20 requests per second, p50=8.935 msec
redis-cpu-µs/op: 8.44
`
	c, err := parseCeiling(out)
	if err != nil {
		t.Fatal(err)
	}
	want := ceilingResult{minP1: 128205.12, minP16: 425531.94, p1: 93457.95, p16: 118343.20, minCPU: [2]float64{3.90, 2.15}, cpu: [2]float64{10.64, 8.44}}
	if c != want {
		t.Errorf("parseCeiling = %+v, want %+v", c, want)
	}
	fast := out + `== fixed_window_fast P1: ...
evalsha 5a 1 ff:user:__rand_int__ -1 1000000 60000000 1 0 0 : 120000.00 requests per second, p50=0.5 msec
redis-cpu-µs/op: 5.00
== fixed_window_fast P16: ...
evalsha 5a 1 ff:user:__rand_int__ -1 1000000 60000000 1 0 0 : 300000.00 requests per second, p50=3 msec
redis-cpu-µs/op: 3.00
`
	c, err = parseCeiling(fast)
	want.fast, want.fastCPU = [2]float64{120000, 300000}, [2]float64{5, 3}
	if err != nil || c != want {
		t.Errorf("parseCeiling with the fast script = %+v, %v, want %+v", c, err, want)
	}
	if _, err := parseCeiling("nothing"); err == nil {
		t.Error("parseCeiling of nothing: no error")
	}
}

// TestTargets: each target row is computed from the rows it names, judged
// against its bound in the right direction, and falls back to the most
// callers a run had.
func TestTargets(t *testing.T) {
	mk := func(lib string, keys, callers int, perSec, p99, redisCPU float64) row {
		return row{lib: lib, keys: keys, callers: callers, redisCPU: redisCPU,
			sum: loadgen.Summary{DecisionsPerSec: perSec, LatencyMS: loadgen.LatencyMS{P99: p99}}}
	}
	ceil := ceilingResult{minP16: 200_000, minCPU: [2]float64{2, 4}}
	redisRows := []row{
		// 64 callers only: the 256-caller targets fall back to it. Redis
		// at 90% of a core for 100,000/s is 9 µs per decision.
		mk("floodgate fixed_window", 100_000, 64, 100_000, 1, 90),
		mk("floodgate gcra", 100_000, 64, 90_000, 1, 90),
		mk("redis_rate", 100_000, 64, 30_000, 1, 90),
		mk(bench.MinimalScriptName, 100_000, 64, 160_000, 1, 90),
	}
	memRows := []row{mk("floodgate memstore gcra", 1, 1, 99, 0, 0), mk("x/time/rate", 1, 1, 100, 0, 0)}
	serveRows := []row{
		mk(serveName, 100_000, 64, 800, 5, 0), mk(noopName, 100_000, 64, 1000, 5, 0),
		mk(envoyName, 100_000, 64, 300, 11, 0),
		mk(serveHTTPName, 100_000, 64, 500, 5, 0), mk(noopHTTPName, 100_000, 64, 1000, 5, 0),
		mk(serveMemName, 100_000, 64, 900, 5, 0), mk(serveMemHTTPName, 100_000, 64, 790, 5, 0),
	}
	var out bytes.Buffer
	targets(&out, ceil, redisRows, memRows, serveRows)
	for _, want := range []string{
		"| Redis `fixed_window`, 64 callers, 100k keys ÷ the minimal `INCR`+`PEXPIRE` script pipelined 16 deep | 100,000/s | 200,000/s | 0.50 | ≥ 0.5 | yes |",
		"| Redis CPU per `fixed_window` decision, 64 callers ÷ the minimal script's per call at `-P 16` | 9.00 µs | 4.00 µs | 2.25 | ≤ 2.0 | no |",
		"| Redis `gcra`, 64 callers, 100k keys ÷ go-redis/redis_rate | 90,000/s | 30,000/s | 3.00 | ≥ 2.0 | yes |",
		"| `serve` on Redis, Envoy gRPC ÷ a no-op grpc-go RLS server, 64 callers, 100k | 800/s | 1,000/s | 0.80 | ≥ 0.8 | yes |",
		"| `serve` on Redis, HTTP `/v1/allow` ÷ a no-op `net/http` handler, 64 callers, 100k | 500/s | 1,000/s | 0.50 | ≥ 0.8 | no |",
		"| `serve` on the memory store, Envoy gRPC ÷ a no-op grpc-go RLS server, 64 callers, 100k | 900/s | 1,000/s | 0.90 | ≥ 0.8 | yes |",
		"| `serve` on the memory store, HTTP `/v1/allow` ÷ a no-op `net/http` handler, 64 callers, 100k | 790/s | 1,000/s | 0.79 | ≥ 0.8 | no |",
		"÷ envoyproxy/ratelimit, decisions/s | 800/s | 300/s | 2.67 | ≥ 2.5 | yes |",
		"| the same, p99 latency | 5ms | 11ms | 0.45 | ≤ 0.5 | yes |",
		"| memory store `gcra`, one key, 1 caller ÷ x/time/rate | 99/s | 100/s | 0.99 | ≥ 1.0 | no |",
		"the minimal script sent by a Go client in this process (minimal script (rueidis), 64 callers, 100k keys) ran 160,000/s, 0.80 of redis-benchmark's `-P 16` figure; `fixed_window` ran 0.62 of it",
		"the no-op gRPC server ÷ envoyproxy/ratelimit, decisions/s, the most any service reaches beside it on this machine: 3.33 (64 callers, 100k)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("targets lack %q:\n%s", want, &out)
		}
	}
	if strings.Contains(out.String(), "no envoyproxy/ratelimit rows") {
		t.Errorf("a note on missing envoyproxy/ratelimit rows with rows present:\n%s", &out)
	}
	out.Reset()
	targets(&out, ceil, redisRows, memRows, serveRows[:2])
	if !strings.Contains(out.String(), "no envoyproxy/ratelimit rows in this run") {
		t.Errorf("no envoyproxy/ratelimit rows, no note:\n%s", &out)
	}
}
