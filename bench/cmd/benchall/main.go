// Command benchall prints the whole benchmark table of BENCHMARKS.md in one
// run, against one redis-server it starts on a loopback port without
// persistence, and stops:
//
//   - the ceiling: redis-benchmark running EVALSHA of floodgate's
//     fixed_window script, unpipelined and 16-deep (redis-ceiling.sh);
//   - floodgate's Redis store, every algorithm (bench.FloodgateVariants),
//     and the peers go-redis/redis_rate and ulule/limiter, at several
//     caller counts on 100k uniform keys and on one hot key;
//   - the embedded store beside x/time/rate and go-limiter on the same load;
//   - `floodgate serve` on that Redis against envoyproxy/ratelimit on that
//     Redis, both loaded over gRPC by `floodgate bench` in its own process,
//     and serve on its embedded memory store (the service's own cost) and
//     a no-op server of each protocol (the floor), over gRPC and HTTP;
//   - ratios against the targets of issue 7, and how the CPU was split
//     between the client, the service and Redis in every row;
//   - the saturation curve (saturation.go; -saturation runs it alone):
//     `floodgate serve` with its default flags, over the memory store and
//     over Redis, under a steady gRPC and HTTP load, beside a busy-loop
//     competitor of 0, 50, 100 and 200% of a core: decisions/s, latency,
//     the failure policy's answers and whether limiting stayed exact.
//
// Every row is driven by internal/loadgen, as `floodgate bench` is.
//
//	cd bench && go run ./cmd/benchall -quick     # under 2 minutes
//	cd bench && go run ./cmd/benchall            # the full table, 11 to 21 minutes
//	cd bench && go run ./cmd/benchall -saturation   # the saturation curve alone
//
// The tables go to stdout (Markdown), progress to stderr. envoyproxy/ratelimit
// rows need its service_cmd binary (-ratelimit-bin, $RATELIMIT_BIN, PATH or
// $(go env GOPATH)/bin); without it they are skipped with a note.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/bench"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

// plan is how much each part of the table runs.
type plan struct {
	callers, serveCallers []int
	keys                  []int
	dur, warm             time.Duration // in-process Redis rows
	memDur, memWarm       time.Duration
	serveDur, serveWarm   time.Duration
	ceilingCalls          int
	// The saturation curve: callers of the steady load, and each step's
	// measured run and warmup.
	satCallers      int
	satDur, satWarm time.Duration
}

var (
	quickPlan = plan{
		callers: []int{1, 64}, serveCallers: []int{64}, keys: []int{100_000, 1},
		dur: 800 * time.Millisecond, warm: 200 * time.Millisecond,
		memDur: 300 * time.Millisecond, memWarm: 100 * time.Millisecond,
		serveDur: 1500 * time.Millisecond, serveWarm: 500 * time.Millisecond,
		ceilingCalls: 50_000,
		satCallers:   64, satDur: 2 * time.Second, satWarm: 300 * time.Millisecond,
	}
	fullPlan = plan{
		callers: []int{1, 16, 64, 256}, serveCallers: []int{16, 64, 256}, keys: []int{100_000, 1},
		dur: 4 * time.Second, warm: time.Second,
		memDur: time.Second, memWarm: 200 * time.Millisecond,
		serveDur: 5 * time.Second, serveWarm: time.Second,
		// redis-benchmark runs a number of calls, not a duration: about
		// 2 s each at this machine's quiet 90k/s, minutes when it is
		// overloaded.
		ceilingCalls: 200_000,
		satCallers:   64, satDur: 5 * time.Second, satWarm: time.Second,
	}
)

// memRounds is how many interleaved rounds the embedded rows run.
const memRounds = 5

// medianRow is the row of rs with the median decisions/s (the upper of
// the two middle ones for an even count).
func medianRow(rs []row) row {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.sum.DecisionsPerSec, b.sum.DecisionsPerSec) })
	return rs[len(rs)/2]
}

// row is one line of a table.
type row struct {
	lib     string
	keys    int
	callers int
	sum     loadgen.Summary
	// scripts is EVAL and EVALSHA calls per decision, calls every Redis
	// command call per decision, those run inside scripts included (NaN:
	// no Redis).
	scripts, calls float64
	// allocs is heap allocations per decision in this process (NaN: the
	// client is another process).
	allocs float64
	// cpuNs is the client's CPU time per decision.
	cpuNs float64
	// cpu is the share of one core each process used during the run, in
	// percent: client, service (NaN for in-process rows), Redis (NaN when
	// there is none).
	clientCPU, serviceCPU, redisCPU float64
	// failedOpen is how many answers floodgate serve gave by fail_open
	// during the row (-1: not floodgate serve).
	failedOpen int64
}

func main() {
	quick := flag.Bool("quick", false, "short runs and fewer caller counts (under 2 minutes)")
	rlBin := flag.String("ratelimit-bin", os.Getenv("RATELIMIT_BIN"), "envoyproxy/ratelimit service_cmd `binary` (default: service_cmd in PATH or $(go env GOPATH)/bin)")
	root := flag.String("root", "..", "the floodgate repository `directory` (for the scripts and cmd/floodgate)")
	satOnly := flag.Bool("saturation", false, "only the saturation curve: floodgate serve with its defaults beside a busy-loop competitor of 0, 50, 100 and 200% of a core (part of the full run)")
	busy := flag.Int("busy-percent", 0, "internal: be the saturation runs' competitor, spinning this `percent` of a core until stdin closes")
	flag.Parse()
	if *busy > 0 {
		busyLoop(*busy, os.Stdin)
		return
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "benchall: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	p := fullPlan
	if *quick {
		p = quickPlan
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, p, *quick, *satOnly, *root, *rlBin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchall:", err)
		os.Exit(1)
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "benchall: "+format+"\n", a...)
}

func run(ctx context.Context, p plan, quick, satOnly bool, root, rlBin string, out io.Writer) error {
	if _, err := os.Stat(filepath.Join(root, "store", "redisstore", "scripts", "fixed_window.lua")); err != nil {
		return fmt.Errorf("-root %s is not the floodgate repository: %w", root, err)
	}
	start := time.Now()
	mode := "full"
	if quick {
		mode = "quick"
	}
	if satOnly {
		mode += ", saturation only"
	}
	fmt.Fprintf(out, "# benchall (%s mode), %s\n\n", mode, start.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "%s\n", machine())
	fmt.Fprintf(out, "Load average at start: %s\n\n", loadavg())

	r, err := bench.StartRedis()
	if err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	defer r.Stop()
	stats := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer stats.Close()
	fmt.Fprintf(out, "One redis-server (%s) on %s, no persistence, shared by every row. "+
		"CPU columns are percent of one core during the row (the machine has %d).\n\n",
		redisVersion(ctx, stats), r.Addr, runtime.NumCPU())

	work, err := os.MkdirTemp("", "benchall.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fg, err := buildFloodgate(ctx, root, work)
	if err != nil {
		return err
	}
	if satOnly {
		if err := saturationSection(ctx, p, fg, work, r, stats, out); err != nil {
			return err
		}
		fmt.Fprintf(out, "Load average at end: %s. Wall time of this run: %v.\n", loadavg(), time.Since(start).Round(time.Second))
		return nil
	}

	// 1. The ceiling.
	logf("ceiling: redis-ceiling.sh")
	ceil, ceilOut, err := ceiling(ctx, root, r.Port(), p.ceilingCalls)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "## Ceilings: redis-benchmark EVALSHA of the minimal INCR+PEXPIRE script and of the fixed_window script, 64 connections, 100k keys\n\n")
	fmt.Fprintf(out, "`bench/redis-ceiling.sh %s %d 64`:\n\n```\n%s```\n\n", r.Port(), p.ceilingCalls, ceilOut)
	if err := stats.FlushAll(ctx).Err(); err != nil {
		return err
	}

	// 2. floodgate's Redis store and the peers, in this process.
	var redisRows []row
	libs := bench.RedisLibs()
	allKeys := bench.Keys(100_000)
	total := len(libs) * len(p.keys) * len(p.callers)
	i := 0
	for _, lib := range libs {
		allow, closeLib, err := lib.Open(r.Addr)
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Name, err)
		}
		for _, nkeys := range p.keys {
			for _, c := range p.callers {
				i++
				rw, err := inProcess(ctx, lib.Name, allow, allKeys[:nkeys], c, p.dur, p.warm, stats)
				if err != nil {
					closeLib()
					return err
				}
				logf("redis %d/%d: %s", i, total, brief(rw))
				redisRows = append(redisRows, rw)
			}
		}
		closeLib()
	}
	fmt.Fprintf(out, "## Redis: floodgate's store per algorithm and the peers (in this process, %v per row after %v of warmup)\n\n", p.dur, p.warm)
	fmt.Fprintf(out, "Limit: %d per second per key (%d for sliding_window_log; concurrency: %d leases of a minute, each decision acquires and releases one). "+
		"Keys drawn uniformly from 100k, or one hot key. From INFO commandstats: `scripts` counts EVALSHA and EVAL calls per decision (for a library that only runs scripts, its round trips), `commands` every command call, including those a script runs (Redis counts them too); `allocs` is runtime.MemStats.Mallocs per decision in this process (client and harness).\n\n",
		bench.RedisLimit, 100_000, 100_000)
	writeRows(out, redisRows, true, false)

	// 3. The embedded store and its peers, in interleaved rounds: every
	// library's rows in turn, memRounds times, each row the round of
	// median decisions/s. A row run once, minutes after its peer's, is
	// two samples of a machine whose load moves (the one-key, one-caller
	// row read 0.89 of x/time/rate so while interleaved runs of the same
	// code put them even at the minimum).
	memAllow := make([]bench.AllowFunc, len(bench.MemLibs))
	var memClose []func()
	closeMem := func() {
		for _, f := range memClose {
			f()
		}
		memClose = nil
	}
	defer closeMem()
	for li, lib := range bench.MemLibs {
		allow, closeLib, err := lib.Open(allKeys)
		if err != nil {
			return fmt.Errorf("%s: %w", lib.Name, err)
		}
		memClose = append(memClose, closeLib)
		memAllow[li] = allow
	}
	rounds := make(map[[3]int][]row)
	total, i = memRounds*len(bench.MemLibs)*len(p.keys)*len(p.callers), 0
	for range memRounds {
		for li, lib := range bench.MemLibs {
			for ki, nkeys := range p.keys {
				for ci, c := range p.callers {
					i++
					rw, err := inProcess(ctx, lib.Name, memAllow[li], allKeys[:nkeys], c, p.memDur/memRounds, p.memWarm, nil)
					if err != nil {
						return err
					}
					logf("memory %d/%d: %s", i, total, brief(rw))
					k := [3]int{li, ki, ci}
					rounds[k] = append(rounds[k], rw)
				}
			}
		}
	}
	closeMem()
	var memRows []row
	for li := range bench.MemLibs {
		for ki := range p.keys {
			for ci := range p.callers {
				memRows = append(memRows, medianRow(rounds[[3]int{li, ki, ci}]))
			}
		}
	}
	fmt.Fprintf(out, "## Embedded: floodgate's memory store beside x/time/rate and go-limiter (%d interleaved rounds of %v per row; each row the round of median decisions/s)\n\n", memRounds, p.memDur/memRounds)
	fmt.Fprintf(out, "%d per second, burst %d (%v of the rate), so that only a decision stamped more than that before its turn (a preempted caller) can be denied. The latency includes the harness (two clock reads, a random key, a histogram record: about 100 ns); `cpu-ns` is this process's CPU per decision.\n\n",
		bench.MemLimit, bench.MemBurst, time.Duration(float64(bench.MemBurst)/bench.MemLimit*float64(time.Second)))
	writeRows(out, memRows, false, false)

	// 4. The gRPC services.
	serveRows, note, err := services(ctx, p, fg, rlBin, work, r, stats)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "## gRPC: `floodgate serve` vs envoyproxy/ratelimit on the same Redis (%v per row after %v of warmup)\n\n", p.serveDur, p.serveWarm)
	fmt.Fprintf(out, "Both loaded by `floodgate bench -grpc ADDR -c CALLERS -keys KEYS` in its own process (4 connections), "+
		"descriptor user=<key> under a rule of a billion per second. floodgate serve on Redis runs with -timeout 1s (store deadline; default 10ms), so that its answers are Redis decisions as envoyproxy/ratelimit's are; failed_open counts those that were not. \"floodgate serve, memory store\" is serve with its defaults on its embedded store, the service's own cost with no store round trip. CPU: bench / service / Redis.\n\n")
	if note != "" {
		fmt.Fprintf(out, "%s\n\n", note)
	}
	writeRows(out, serveRows, true, true)

	// 5. Targets and ratios.
	targets(out, ceil, redisRows, memRows, serveRows)
	fmt.Fprintf(out, "## Ratios\n\n")
	ratios(out, ceil, redisRows, memRows, serveRows)

	// 6. The saturation curve, in the full run.
	if !quick {
		if err := saturationSection(ctx, p, fg, work, r, stats, out); err != nil {
			return err
		}
	}

	fmt.Fprintf(out, "\nLoad average at end: %s. Wall time of this run: %v.\n", loadavg(), time.Since(start).Round(time.Second))
	return nil
}

// inProcess runs one row whose client is this process.
func inProcess(ctx context.Context, name string, allow bench.AllowFunc, keys []string, callers int,
	dur, warm time.Duration, stats *redis.Client) (row, error) {
	t := loadgen.TargetFunc(func(ctx context.Context, k int) (loadgen.Outcome, error) {
		key := keys[0]
		if k > 0 {
			key = keys[k]
		}
		ok, err := allow(ctx, key)
		if err != nil {
			return 0, err
		}
		if ok {
			return loadgen.OK, nil
		}
		return loadgen.OverLimit, nil
	})
	cfg := loadgen.Config{Callers: callers, Keys: len(keys)}
	if warm > 0 {
		w := cfg
		w.Duration = warm
		if _, err := loadgen.Run(ctx, t, w); err != nil {
			return row{}, err
		}
	}
	cfg.Duration = dur
	var before, after bench.ServerStats
	var err error
	if stats != nil {
		if before, err = bench.ReadServerStats(ctx, stats); err != nil {
			return row{}, err
		}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := selfCPU()
	res, err := loadgen.Run(ctx, t, cfg)
	if err != nil {
		return row{}, err
	}
	cpu1 := selfCPU()
	runtime.ReadMemStats(&m1)
	if stats != nil {
		if after, err = bench.ReadServerStats(ctx, stats); err != nil {
			return row{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return row{}, err
	}
	rw := row{lib: name, keys: len(keys), callers: callers, sum: loadgen.Summarize(res, name, cfg),
		scripts: math.NaN(), calls: math.NaN(), serviceCPU: math.NaN(), redisCPU: math.NaN()}
	n := float64(res.Total())
	secs := res.Elapsed.Seconds()
	rw.allocs = float64(m1.Mallocs-m0.Mallocs) / n
	rw.cpuNs = (cpu1 - cpu0).Seconds() * 1e9 / n
	rw.clientCPU = 100 * (cpu1 - cpu0).Seconds() / secs
	if stats != nil {
		rw.scripts = float64(after.Scripts-before.Scripts) / n
		rw.calls = float64(after.Calls-before.Calls) / n
		rw.redisCPU = 100 * (after.CPUSec - before.CPUSec) / secs
	}
	return rw, nil
}

func brief(r row) string {
	s := fmt.Sprintf("%s keys=%d callers=%d: %.0f/s p99 %s", r.lib, r.keys, r.callers,
		r.sum.DecisionsPerSec, loadgen.FormatMS(r.sum.LatencyMS.P99))
	if r.sum.Errors > 0 || r.sum.OverLimit > 0 {
		s += fmt.Sprintf(" (over_limit %d, errors %d: %s)", r.sum.OverLimit, r.sum.Errors, r.sum.FirstError)
	}
	return s
}

func keysName(n int) string {
	if n == 1 {
		return "1 (hot)"
	}
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

func num(f float64, prec int) string {
	if math.IsNaN(f) {
		return ""
	}
	return strconv.FormatFloat(f, 'f', prec, 64)
}

// thousands prints f rounded, with thin separators.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func writeRows(out io.Writer, rows []row, withRedis, external bool) {
	head := "| library | keys | callers | decisions/s | p50 | p99 | p99.9 | max | over_limit | errors |"
	sep := "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	if withRedis {
		head += " scripts/decision | commands/decision |"
		sep += "---:|---:|"
	}
	if !external {
		head += " allocs/decision | cpu-ns/decision |"
		sep += "---:|---:|"
	} else {
		head += " failed_open |"
		sep += "---:|"
	}
	head += " CPU % |"
	sep += "---|"
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, sep)
	for _, r := range rows {
		l := r.sum.LatencyMS
		line := fmt.Sprintf("| %s | %s | %d | %s | %s | %s | %s | %s | %d | %d |", r.lib, keysName(r.keys), r.callers,
			thousands(r.sum.DecisionsPerSec), loadgen.FormatMS(l.P50), loadgen.FormatMS(l.P99),
			loadgen.FormatMS(l.P999), loadgen.FormatMS(l.Max), r.sum.OverLimit, r.sum.Errors)
		if withRedis {
			line += " " + num(r.scripts, 2) + " | " + num(r.calls, 2) + " |"
		}
		if !external {
			line += fmt.Sprintf(" %s | %s |", num(r.allocs, 1), thousands(r.cpuNs))
		} else if r.failedOpen >= 0 {
			line += fmt.Sprintf(" %d |", r.failedOpen)
		} else {
			line += " |"
		}
		cpu := []string{num(r.clientCPU, 0)}
		if !math.IsNaN(r.serviceCPU) {
			cpu = append(cpu, num(r.serviceCPU, 0))
		}
		if !math.IsNaN(r.redisCPU) {
			cpu = append(cpu, num(r.redisCPU, 0))
		}
		line += " " + strings.Join(cpu, " / ") + " |"
		fmt.Fprintln(out, line)
	}
	fmt.Fprintln(out)
}

// find returns the row of lib, keys, callers.
func find(rows []row, lib string, keys, callers int) (row, bool) {
	for _, r := range rows {
		if r.lib == lib && r.keys == keys && r.callers == callers {
			return r, true
		}
	}
	return row{}, false
}

func ratios(out io.Writer, ceil ceilingResult, redisRows, memRows, serveRows []row) {
	// Floodgate at 64+ callers ÷ redis_rate.
	fmt.Fprintf(out, "Floodgate's Redis store ÷ go-redis/redis_rate, decisions/s at 64+ callers (target: at least 2):\n\n")
	fmt.Fprintln(out, "| floodgate | keys | callers | floodgate /s | redis_rate /s | ratio |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|")
	for _, r := range redisRows {
		if !strings.HasPrefix(r.lib, "floodgate ") || r.callers < 64 {
			continue
		}
		if peer, ok := find(redisRows, "redis_rate", r.keys, r.callers); ok {
			fmt.Fprintf(out, "| %s | %s | %d | %s | %s | %.2f |\n", strings.TrimPrefix(r.lib, "floodgate "), keysName(r.keys), r.callers,
				thousands(r.sum.DecisionsPerSec), thousands(peer.sum.DecisionsPerSec), r.sum.DecisionsPerSec/peer.sum.DecisionsPerSec)
		}
	}
	fmt.Fprintln(out)

	// Every Redis row ÷ the physical ceiling.
	fmt.Fprintf(out, "Floodgate's Redis store ÷ the minimal INCR+PEXPIRE script (100k keys): decisions/s against the script's -P 16 calls/s (target for fixed_window at 256 callers: at least 0.5), and Redis CPU per decision against the script's per call (target for the O(1) algorithms: at most 2):\n\n")
	fmt.Fprintln(out, "| floodgate | callers | decisions/s | ÷ minimal P16 | ÷ fixed_window script P16 | Redis µs/decision | ÷ minimal's µs/call |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range redisRows {
		// The minimal script through the Go client is the ceiling this
		// process reaches: its row beside floodgate's.
		if !strings.HasPrefix(r.lib, "floodgate ") && r.lib != bench.MinimalScriptName || r.keys != 100_000 {
			continue
		}
		us := redisMicros(r)
		fmt.Fprintf(out, "| %s | %d | %s | %.2f | %.2f | %s | %s |\n", strings.TrimPrefix(r.lib, "floodgate "), r.callers, thousands(r.sum.DecisionsPerSec),
			r.sum.DecisionsPerSec/ceil.minP16, r.sum.DecisionsPerSec/ceil.p16, num(us, 2), num(us/ceil.minCPU[1], 2))
	}
	fmt.Fprintf(out, "\nCeilings: the minimal script %s calls/s unpipelined, %s with -P 16 (Redis %s and %s µs per call); floodgate's fixed_window script %s and %s (%s and %s µs).\n\n",
		thousands(ceil.minP1), thousands(ceil.minP16), num(ceil.minCPU[0], 2), num(ceil.minCPU[1], 2),
		thousands(ceil.p1), thousands(ceil.p16), num(ceil.cpu[0], 2), num(ceil.cpu[1], 2))
	if ceil.fast[0] > 0 {
		fmt.Fprintf(out, "The small script a single aligned fixed-window decision goes out as (fixed_window_fast.lua): %s and %s calls/s (%s and %s µs per call): %.2f and %.2f of the minimal script's CPU per call.\n\n",
			thousands(ceil.fast[0]), thousands(ceil.fast[1]), num(ceil.fastCPU[0], 2), num(ceil.fastCPU[1], 2),
			ceil.fastCPU[0]/ceil.minCPU[0], ceil.fastCPU[1]/ceil.minCPU[1])
	}

	// serve ÷ envoyproxy/ratelimit.
	fmt.Fprintf(out, "`floodgate serve` ÷ envoyproxy/ratelimit on the same gRPC load (target: at least 3 on decisions/s, at most 0.5 on p99):\n\n")
	fmt.Fprintln(out, "| keys | callers | serve /s | ratelimit /s | decisions/s ratio | serve p99 | ratelimit p99 | p99 ratio |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---:|")
	anyServe := false
	for _, r := range serveRows {
		if r.lib != serveName {
			continue
		}
		if peer, ok := find(serveRows, envoyName, r.keys, r.callers); ok {
			anyServe = true
			fmt.Fprintf(out, "| %s | %d | %s | %s | %.2f | %s | %s | %.2f |\n", keysName(r.keys), r.callers,
				thousands(r.sum.DecisionsPerSec), thousands(peer.sum.DecisionsPerSec), r.sum.DecisionsPerSec/peer.sum.DecisionsPerSec,
				loadgen.FormatMS(r.sum.LatencyMS.P99), loadgen.FormatMS(peer.sum.LatencyMS.P99), r.sum.LatencyMS.P99/peer.sum.LatencyMS.P99)
		}
	}
	if !anyServe {
		fmt.Fprintln(out, "| (no envoyproxy/ratelimit rows in this run) | | | | | | | |")
	}
	fmt.Fprintln(out)

	// serve ÷ the no-op servers.
	fmt.Fprintf(out, "`floodgate serve` ÷ a no-op server of the same protocol on the same load (noopserver: answers OK, decides nothing; target: at least 0.8 on decisions/s, at most 1.25 on the service's CPU per decision):\n\n")
	fmt.Fprintln(out, "| protocol | serve's store | keys | callers | serve /s | no-op /s | decisions/s ratio | serve CPU µs/decision | no-op CPU µs/decision | CPU ratio | serve p99 | no-op p99 |")
	fmt.Fprintln(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, pair := range [][2]string{{serveName, noopName}, {serveHTTPName, noopHTTPName}, {serveMemName, noopName}, {serveMemHTTPName, noopHTTPName}} {
		for _, r := range serveRows {
			if r.lib != pair[0] {
				continue
			}
			if peer, ok := find(serveRows, pair[1], r.keys, r.callers); ok {
				sc, nc := serviceMicros(r), serviceMicros(peer)
				fmt.Fprintf(out, "| %s | %s | %s | %d | %s | %s | %.2f | %s | %s | %.2f | %s | %s |\n", protocolOf(r.lib), storeOf(r.lib), keysName(r.keys), r.callers,
					thousands(r.sum.DecisionsPerSec), thousands(peer.sum.DecisionsPerSec), r.sum.DecisionsPerSec/peer.sum.DecisionsPerSec,
					num(sc, 1), num(nc, 1), sc/nc, loadgen.FormatMS(r.sum.LatencyMS.P99), loadgen.FormatMS(peer.sum.LatencyMS.P99))
			}
		}
	}
	fmt.Fprintln(out)

	// memstore ÷ x/time/rate.
	fmt.Fprintf(out, "Floodgate's memory store ÷ x/time/rate (decisions/s above 1 and CPU below 1 favour floodgate):\n\n")
	fmt.Fprintln(out, "| floodgate | keys | callers | decisions/s ratio | cpu-ns/decision ratio |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|")
	for _, r := range memRows {
		if !strings.HasPrefix(r.lib, "floodgate ") {
			continue
		}
		if peer, ok := find(memRows, "x/time/rate", r.keys, r.callers); ok {
			fmt.Fprintf(out, "| %s | %s | %d | %.2f | %.2f |\n", strings.TrimPrefix(r.lib, "floodgate memstore "), keysName(r.keys), r.callers,
				r.sum.DecisionsPerSec/peer.sum.DecisionsPerSec, r.cpuNs/peer.cpuNs)
		}
	}
	fmt.Fprintln(out)

	// Variants of a base algorithm ("fixed_window+local_budget" beside
	// "fixed_window"): what the variant changes.
	fmt.Fprintf(out, "Variants beside their base algorithm (a FloodgateVariants entry named base+feature; local budgets: target at least 5x fewer Redis calls per decision on the hot key):\n\n")
	fmt.Fprintln(out, "| variant | keys | callers | scripts/decision: base ÷ variant | commands/decision: base ÷ variant | decisions/s: variant ÷ base | p99: variant ÷ base |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|")
	anyVariant := false
	for _, r := range redisRows {
		name := strings.TrimPrefix(r.lib, "floodgate ")
		base, _, ok := strings.Cut(name, "+")
		if !ok || !strings.HasPrefix(r.lib, "floodgate ") {
			continue
		}
		if b, ok := find(redisRows, "floodgate "+base, r.keys, r.callers); ok {
			anyVariant = true
			fmt.Fprintf(out, "| %s | %s | %d | %.1f | %.1f | %.2f | %.2f |\n", name, keysName(r.keys), r.callers,
				b.scripts/r.scripts, b.calls/r.calls, r.sum.DecisionsPerSec/b.sum.DecisionsPerSec, r.sum.LatencyMS.P99/b.sum.LatencyMS.P99)
		}
	}
	if !anyVariant {
		fmt.Fprintln(out, "| (none in bench.FloodgateVariants) | | | | | | |")
	}
	fmt.Fprintln(out)
}

// redisMicros is Redis's CPU per decision of a row, in µs.
func redisMicros(r row) float64 {
	return r.redisCPU / 100 / r.sum.DecisionsPerSec * 1e6
}

// serviceMicros is the service's CPU per decision of an external row, in µs.
func serviceMicros(r row) float64 {
	return r.serviceCPU / 100 / r.sum.DecisionsPerSec * 1e6
}

// protocolOf names the protocol of a service row.
// storeOf is the store a floodgate serve row decided on.
func storeOf(lib string) string {
	if strings.Contains(lib, "memory store") {
		return "memory"
	}
	return "Redis"
}

func protocolOf(lib string) string {
	if strings.HasSuffix(lib, "(HTTP)") {
		return "HTTP /v1/allow"
	}
	return "gRPC RLS"
}

// ceilingResult is what redis-ceiling.sh measured: calls per second of
// the minimal INCR+PEXPIRE script and of floodgate's fixed_window script,
// unpipelined (p1) and 16 deep (p16), and Redis's CPU per call of each.
type ceilingResult struct {
	minP1, minP16, p1, p16 float64
	minCPU, cpu            [2]float64 // µs per call: P1, P16
	// fast is fixed_window_fast.lua's P1 and P16 calls/s and fastCPU its
	// µs per call, when the script printed them.
	fast, fastCPU [2]float64
}

// ceiling runs redis-ceiling.sh against the shared server and reads its
// two calls-per-second figures.
func ceiling(ctx context.Context, root, port string, calls int) (ceilingResult, string, error) {
	cmd := exec.CommandContext(ctx, "sh", filepath.Join(root, "bench", "redis-ceiling.sh"), port, strconv.Itoa(calls), "64")
	b, err := cmd.CombinedOutput()
	if err != nil {
		return ceilingResult{}, "", fmt.Errorf("redis-ceiling.sh: %w\n%s", err, b)
	}
	c, err := parseCeiling(string(b))
	if err != nil {
		return ceilingResult{}, "", fmt.Errorf("redis-ceiling.sh: %w:\n%s", err, b)
	}
	return c, string(b), nil
}

// parseCeiling reads redis-ceiling.sh's output: in order, the minimal
// script P1 and P16, then fixed_window P1 and P16, each a line of
// requests per second and one of redis-cpu-µs/op.
func parseCeiling(out string) (ceilingResult, error) {
	var rates, cpus []float64
	last := func(s string) (float64, bool) {
		f := strings.Fields(s)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], ":"), 64)
		return v, err == nil
	}
	for line := range strings.SplitSeq(out, "\n") {
		if before, _, ok := strings.Cut(line, " requests per second"); ok {
			if v, ok := last(before); ok {
				rates = append(rates, v)
			}
		}
		if after, ok := strings.CutPrefix(line, "redis-cpu-µs/op: "); ok {
			if v, ok := last(after); ok {
				cpus = append(cpus, v)
			}
		}
	}
	if (len(rates) != 4 && len(rates) != 6) || len(cpus) != len(rates) {
		return ceilingResult{}, fmt.Errorf("want 4 or 6 figures of requests per second and as many of CPU per call, got %d and %d", len(rates), len(cpus))
	}
	c := ceilingResult{minP1: rates[0], minP16: rates[1], p1: rates[2], p16: rates[3],
		minCPU: [2]float64{cpus[0], cpus[1]}, cpu: [2]float64{cpus[2], cpus[3]}}
	if len(rates) == 6 {
		c.fast, c.fastCPU = [2]float64{rates[4], rates[5]}, [2]float64{cpus[4], cpus[5]}
	}
	return c, nil
}

const (
	serveName     = "floodgate serve"
	envoyName     = "envoyproxy/ratelimit"
	noopName      = "no-op gRPC server"
	serveHTTPName = "floodgate serve (HTTP)"
	// serve on its embedded memory store.
	serveMemName     = "floodgate serve, memory store"
	serveMemHTTPName = "floodgate serve, memory store (HTTP)"
	noopHTTPName     = "no-op net/http (HTTP)"
)

const serviceYAML = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

// services measures `floodgate serve` and envoyproxy/ratelimit on the
// shared Redis, loaded by `floodgate bench` processes.
func services(ctx context.Context, p plan, fg, rlBin, work string, r *bench.Redis, stats *redis.Client) ([]row, string, error) {
	cfgDir := filepath.Join(work, "rt", "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(serviceYAML), 0o644); err != nil {
		return nil, "", err
	}

	var rows []row
	measure := func(name string, pid int, target []string, metricsURL string) error {
		for _, nkeys := range p.keys {
			for _, c := range p.serveCallers {
				var fo0 int64
				if metricsURL != "" {
					var err error
					if fo0, err = failedOpen(metricsURL); err != nil {
						return err
					}
				}
				rw, err := external(ctx, fg, name, pid, target, nkeys, c, p.serveDur, p.serveWarm, r, stats)
				if err != nil {
					return err
				}
				rw.failedOpen = -1
				if metricsURL != "" {
					fo1, err := failedOpen(metricsURL)
					if err != nil {
						return err
					}
					rw.failedOpen = fo1 - fo0
				}
				logf("grpc: %s", brief(rw))
				rows = append(rows, rw)
			}
		}
		return nil
	}

	// floodgate serve, on Redis (as envoyproxy/ratelimit decides) and on
	// the embedded memory store (the service's own cost and nothing
	// else: the floor the no-op servers are compared with).
	for _, st := range []struct {
		grpc, http string
		args       []string
	}{
		// A store deadline of 1s rather than the default 10ms: every
		// answer is then a decision Redis made, as envoyproxy/ratelimit's
		// are (it has no deadline); the failed_open column counts any
		// left.
		{serveName, serveHTTPName, []string{"-redis", "redis://" + r.Addr, "-timeout", "1s"}},
		{serveMemName, serveMemHTTPName, nil},
	} {
		if err := stats.FlushAll(ctx).Err(); err != nil {
			return nil, "", err
		}
		httpPort, grpcPort := freePort(), freePort()
		grpcAddr := "127.0.0.1:" + grpcPort
		args := append([]string{"serve", "-http", "127.0.0.1:" + httpPort, "-grpc", grpcAddr,
			"-config", cfgDir, "-log-level", "error"}, st.args...)
		srv := exec.Command(fg, args...)
		srvLog, err := os.Create(filepath.Join(work, "serve.log"))
		if err != nil {
			return nil, "", err
		}
		srv.Stdout, srv.Stderr = srvLog, srvLog
		if err := srv.Start(); err != nil {
			srvLog.Close()
			return nil, "", err
		}
		stopSrv := func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait(); srvLog.Close() }
		if err := waitHTTP(ctx, "http://127.0.0.1:"+httpPort+"/readyz", "ok"); err != nil {
			stopSrv()
			return nil, "", fmt.Errorf("floodgate serve %q: %w; log %s", args, err, readFile(srvLog.Name()))
		}
		metrics := "http://127.0.0.1:" + httpPort + "/metrics"
		err = measure(st.grpc, srv.Process.Pid, []string{"-grpc", grpcAddr}, metrics)
		if err == nil {
			err = measure(st.http, srv.Process.Pid, []string{"-http", "http://127.0.0.1:" + httpPort}, metrics)
		}
		stopSrv()
		if err != nil {
			return nil, "", err
		}
	}

	// The no-op servers: the floor of each protocol.
	noop, noopGRPC, noopHTTP, stopNoop, err := startNoop(ctx, work)
	if err != nil {
		return nil, "", err
	}
	err = measure(noopName, noop, []string{"-grpc", noopGRPC}, "")
	if err == nil {
		err = measure(noopHTTPName, noop, []string{"-http", noopHTTP}, "")
	}
	stopNoop()
	if err != nil {
		return nil, "", err
	}

	// envoyproxy/ratelimit.
	bin := findRatelimit(rlBin)
	if bin == "" {
		return rows, "**envoyproxy/ratelimit rows skipped**: no service_cmd binary (install it with " +
			"`go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36`, or pass -ratelimit-bin).", nil
	}
	if err := stats.FlushAll(ctx).Err(); err != nil {
		return nil, "", err
	}
	httpPort, grpcPort, debugPort := freePort(), freePort(), freePort()
	grpcAddr := "127.0.0.1:" + grpcPort
	rl := exec.Command(bin)
	rl.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT="+grpcPort,
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+debugPort,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+r.Addr, "USE_STATSD=false",
		"RUNTIME_ROOT="+filepath.Join(work, "rt"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=warn")
	rlLog, err := os.Create(filepath.Join(work, "ratelimit.log"))
	if err != nil {
		return nil, "", err
	}
	defer rlLog.Close()
	rl.Stdout, rl.Stderr = rlLog, rlLog
	if err := rl.Start(); err != nil {
		return nil, "", err
	}
	stopRL := func() { rl.Process.Signal(syscall.SIGTERM); rl.Wait() }
	// /rlconfig on the debug port lists the rules once the runtime loaded
	// them.
	if err := waitHTTP(ctx, "http://127.0.0.1:"+debugPort+"/rlconfig", "bench"); err != nil {
		stopRL()
		return nil, "", fmt.Errorf("envoyproxy/ratelimit: %w; log %s", err, readFile(rlLog.Name()))
	}
	err = measure(envoyName, rl.Process.Pid, []string{"-grpc", grpcAddr}, "")
	stopRL()
	if err != nil {
		return nil, "", err
	}
	return rows, fmt.Sprintf("envoyproxy/ratelimit: %s.", bin), nil
}

// buildFloodgate builds cmd/floodgate of the repository at root into work
// and returns the binary's path.
func buildFloodgate(ctx context.Context, root, work string) (string, error) {
	fg := filepath.Join(work, "floodgate")
	logf("building cmd/floodgate")
	build := exec.CommandContext(ctx, "go", "build", "-o", fg, "./cmd/floodgate")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/floodgate: %w\n%s", err, b)
	}
	return fg, nil
}

// startNoop builds and starts bench/cmd/noopserver, returning its pid,
// its gRPC address and HTTP URL, and a func that stops it.
func startNoop(ctx context.Context, work string) (pid int, grpcAddr, httpURL string, stop func(), err error) {
	bin := filepath.Join(work, "noopserver")
	logf("building cmd/noopserver")
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/noopserver").CombinedOutput(); err != nil {
		return 0, "", "", nil, fmt.Errorf("go build ./cmd/noopserver: %w\n%s", err, b)
	}
	cmd := exec.Command(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, "", "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return 0, "", "", nil, err
	}
	stop = func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 256)
		n, _ := io.ReadAtLeast(stdout, b, 1)
		line <- string(b[:n])
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		// "noopserver: grpc ADDR http ADDR"
		f := strings.Fields(l)
		if len(f) != 5 {
			stop()
			return 0, "", "", nil, fmt.Errorf("noopserver said %q", l)
		}
		return cmd.Process.Pid, f[2], "http://" + f[4], stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return 0, "", "", nil, errors.New("noopserver did not start within 30 s")
	}
}

// external runs one row: a warmup `floodgate bench`, then the measured
// one, reading the CPU of the bench process, the service and Redis.
// target is the flag and address of what to load: "-grpc" ADDR or
// "-http" URL.
func external(ctx context.Context, fg, name string, pid int, target []string, nkeys, callers int,
	dur, warm time.Duration, r *bench.Redis, stats *redis.Client) (row, error) {
	args := append([]string{"bench"}, target...)
	args = append(args, "-c", strconv.Itoa(callers), "-keys", strconv.Itoa(nkeys), "-quiet", "-json")
	if warm > 0 {
		w := exec.CommandContext(ctx, fg, append(args, "-d", warm.String())...)
		if b, err := w.CombinedOutput(); err != nil {
			return row{}, fmt.Errorf("floodgate bench (warmup) against %s: %w\n%s", name, err, b)
		}
	}
	before, err := bench.ReadServerStats(ctx, stats)
	if err != nil {
		return row{}, err
	}
	svc0, err := procCPU(pid)
	if err != nil {
		return row{}, err
	}
	cmd := exec.CommandContext(ctx, fg, append(args, "-d", dur.String())...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return row{}, fmt.Errorf("floodgate bench against %s: %w\n%s", name, err, stderr.String())
	}
	svc1, err := procCPU(pid)
	if err != nil {
		return row{}, err
	}
	after, err := bench.ReadServerStats(ctx, stats)
	if err != nil {
		return row{}, err
	}
	var sum loadgen.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		return row{}, fmt.Errorf("floodgate bench output: %w\n%s", err, b)
	}
	sum.Target = name
	rw := row{lib: name, keys: nkeys, callers: callers, sum: sum, allocs: math.NaN(), cpuNs: math.NaN()}
	n := float64(sum.Calls)
	secs := sum.ElapsedSeconds
	clientCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	rw.scripts = float64(after.Scripts-before.Scripts) / n
	rw.calls = float64(after.Calls-before.Calls) / n
	rw.clientCPU = 100 * clientCPU.Seconds() / secs
	rw.serviceCPU = 100 * (svc1 - svc0).Seconds() / secs
	rw.redisCPU = 100 * (after.CPUSec - before.CPUSec) / secs
	return rw, nil
}

// failedOpen reads floodgate serve's count of answers given by fail_open
// (floodgate_decisions_total{outcome="failed_open"}) from its /metrics.
func failedOpen(url string) (int64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var n int64
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "floodgate_decisions_total{") || !strings.Contains(line, `outcome="failed_open"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		n += int64(v)
	}
	return n, nil
}

// findRatelimit returns the envoyproxy/ratelimit binary: bin if set, else
// service_cmd in PATH or in $(go env GOPATH)/bin; "" if there is none.
func findRatelimit(bin string) string {
	if bin != "" {
		return bin
	}
	if p, err := exec.LookPath("service_cmd"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "service_cmd")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// waitHTTP polls url (up to 15 s) until it answers 200 with a body
// containing want.
func waitHTTP(ctx context.Context, url, want string) error {
	deadline := time.Now().Add(15 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return nil
			}
			err = fmt.Errorf("%s: %d %q", url, resp.StatusCode, b)
		}
		last = err
		time.Sleep(50 * time.Millisecond) // polls a process we do not control
	}
	return fmt.Errorf("not ready after 15s: %v", last)
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

func readFile(name string) string {
	b, _ := os.ReadFile(name)
	return string(b)
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the user and system CPU time of process pid, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s, the value
// of USER_HZ on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields restart after
	// its closing parenthesis, at field 3.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unexpected /proc stat format")
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("Machine: %d CPUs (%s), %s %s/%s. Client, services and Redis share these CPUs; other processes may too (see the load average).",
		runtime.NumCPU(), cpu, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func redisVersion(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "redis"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v
		}
	}
	return "redis"
}
