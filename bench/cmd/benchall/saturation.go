package main

// The saturation curve (issue 31, part 4): `floodgate serve` with its
// default flags, over the memory store and over the shared redis-server,
// under a steady load (Envoy gRPC, then the HTTP API) while a busy-loop
// competitor process burns 0, 50, 100 and 200% of a core. Per step:
// decisions/s and latency of the load, the answers the failure policy gave
// (counted by the load generator from each answer, and by serve's own
// floodgate_decisions_total), and whether limiting stayed exact: a probe
// beside the load spends fresh keys of a small limit, each with four
// times the limit in concurrent requests, and counts what each admitted.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate/bench"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
)

const (
	// probeLimit is the limit per hour of each probe key; probePerKey the
	// requests each probe round sends to its key, probeWorkers at once.
	probeLimit   = 20
	probePerKey  = 4 * probeLimit
	probeWorkers = 8
	// maxProbeRounds bounds the probe of one step.
	maxProbeRounds = 10_000
	// busyMax bounds a competitor's life, should benchall die without
	// stopping it.
	busyMax = 10 * time.Minute
)

// busyLevels are the competitor's shares of one core, in percent.
var busyLevels = []int{0, 50, 100, 200}

// satYAML is serve's config for the saturation runs: the load's
// descriptor user=<key> under a rule of a billion per second, and the
// probe's probe=<round> under probeLimit per hour (each value its own
// counter).
var satYAML = fmt.Sprintf(`domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: probe
    rate_limit:
      unit: hour
      requests_per_unit: %d
`, probeLimit)

// satRow is one step of the curve.
type satRow struct {
	store, proto string
	busy         int // percent of a core
	load         loadgen.Summary
	loadAvg      string // one-minute load average before the step
	// serveOutcomes is the change of serve's floodgate_decisions_total by
	// outcome during the step (load and probe).
	serveOutcomes map[string]int64
	probe         probeResult
	// goroutines is the most serve had during the step (go_goroutines,
	// sampled every 100 ms).
	goroutines int64
	// serviceCPU, busyCPU: percent of one core during the step.
	serviceCPU, busyCPU float64
	// redisConns is how many connections Redis accepted during the step
	// (serve's reconnections; benchall's own client stays connected), -1
	// for the memory store.
	redisConns int64
}

// probeResult is what the probe rounds of one step admitted.
type probeResult struct {
	rounds int
	// exact counts the rounds that admitted exactly probeLimit, every
	// answer the store's own.
	exact int
	// worst is the most one round admitted (store and failure policy).
	worst int
	// worstStore is the most one round's store decisions admitted.
	worstStore int
	// fewest is the least one round admitted.
	fewest                   int
	requests, policy, errors int64
	firstError               string
}

// policyShare is the share of every answer (load and probe) given by the
// failure policy, counted by the clients.
func (r satRow) policyShare() float64 {
	n := float64(r.load.Calls + r.probe.requests)
	if n == 0 {
		return math.NaN()
	}
	return float64(r.load.StoreError+r.probe.policy) / n
}

// serveFailed is serve's count of failure-policy answers during the step.
func (r satRow) serveFailed() int64 {
	var n int64
	for _, o := range []string{"failed_open", "failed_closed", "local_allowed", "local_denied", "ledger_failed"} {
		n += r.serveOutcomes[o]
	}
	return n
}

// saturation runs the curve with the floodgate binary fg, for both stores
// and both protocols.
func saturation(ctx context.Context, p plan, fg, work string, r *bench.Redis, stats *redis.Client) ([]satRow, error) {
	cfgDir := filepath.Join(work, "saturation-config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(satYAML), 0o644); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var rows []satRow
	for _, store := range []string{"memory", "redis"} {
		args := []string{"serve", "-config", cfgDir, "-log-level", "error"}
		if store == "redis" {
			if err := stats.FlushAll(ctx).Err(); err != nil {
				return nil, err
			}
			args = append(args, "-redis", "redis://"+r.Addr)
		}
		svc, err := startServe(ctx, fg, work, "saturation-"+store, args)
		if err != nil {
			return nil, err
		}
		round := 0
		for _, proto := range []string{"grpc", "http"} {
			for _, busy := range busyLevels {
				var conns *redis.Client
				if store == "redis" {
					conns = stats
				}
				rw, err := satStep(ctx, p, fg, self, svc, conns, store, proto, busy, &round)
				if err != nil {
					svc.stop()
					return nil, fmt.Errorf("saturation %s %s busy=%d%%: %w; serve's log: %s", store, proto, busy, err, readFile(svc.log))
				}
				logf("saturation: %s", satBrief(rw))
				rows = append(rows, rw)
			}
		}
		svc.stop()
	}
	return rows, nil
}

// serveProc is a running `floodgate serve`.
type serveProc struct {
	cmd                           *exec.Cmd
	pid                           int
	grpcAddr, httpURL, metricsURL string
	log                           string // its stdout and stderr
	stop                          func()
	stopOnce                      sync.Once
	exited                        chan struct{}
}

// startServe starts fg with args plus loopback listeners and waits until
// it is ready.
func startServe(ctx context.Context, fg, work, name string, args []string) (*serveProc, error) {
	httpPort, grpcPort := freePort(), freePort()
	s := &serveProc{grpcAddr: "127.0.0.1:" + grpcPort, httpURL: "http://127.0.0.1:" + httpPort,
		log: filepath.Join(work, name+".log"), exited: make(chan struct{})}
	s.metricsURL = s.httpURL + "/metrics"
	f, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(fg, append(args, "-http", "127.0.0.1:"+httpPort, "-grpc", s.grpcAddr)...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	s.pid = s.cmd.Process.Pid
	go func() { s.cmd.Wait(); close(s.exited) }()
	s.stop = func() {
		s.stopOnce.Do(func() {
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.exited:
			case <-time.After(30 * time.Second):
				s.cmd.Process.Kill()
				<-s.exited
			}
			f.Close()
		})
	}
	if err := waitHTTP(ctx, s.httpURL+"/readyz", "ok"); err != nil {
		s.stop()
		return nil, fmt.Errorf("floodgate %s: %w; log %s", strings.Join(args, " "), err, readFile(s.log))
	}
	return s, nil
}

// satStep runs one step: the competitor at busy percent, a warmup, then
// the measured load with the probe beside it.
func satStep(ctx context.Context, p plan, fg, self string, svc *serveProc, conns *redis.Client, store, proto string, busy int, round *int) (satRow, error) {
	rw := satRow{store: store, proto: proto, busy: busy, loadAvg: loadavg(), redisConns: -1}
	comp, err := startBusy(self, busy)
	if err != nil {
		return rw, err
	}
	defer comp.stop()

	target := []string{"-grpc", svc.grpcAddr}
	if proto == "http" {
		target = []string{"-http", svc.httpURL}
	}
	args := append([]string{"bench"}, target...)
	args = append(args, "-c", strconv.Itoa(p.satCallers), "-keys", "100000", "-quiet", "-json")
	if p.satWarm > 0 {
		w := exec.CommandContext(ctx, fg, append(args, "-d", p.satWarm.String())...)
		if b, err := w.CombinedOutput(); err != nil {
			return rw, fmt.Errorf("floodgate bench (warmup): %w\n%s", err, b)
		}
	}

	before, err := readMetrics(svc.metricsURL)
	if err != nil {
		return rw, err
	}
	svc0, err := procCPU(svc.pid)
	if err != nil {
		return rw, err
	}
	busy0 := comp.cpu()
	var conns0 int64
	if conns != nil {
		if conns0, err = connectionsReceived(ctx, conns); err != nil {
			return rw, err
		}
	}

	// The probe and the goroutine sampler run while the load does.
	pctx, stopProbe := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var probe probeResult
	var probeErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		probe, probeErr = runProbe(pctx, svc, proto, round)
	}()
	var maxG atomic.Int64
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := readMetrics(svc.metricsURL); err == nil {
				maxG.Store(max(maxG.Load(), int64(m.goroutines)))
			}
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	cmd := exec.CommandContext(ctx, fg, append(args, "-d", p.satDur.String())...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	elapsed := time.Since(start)
	stopProbe()
	wg.Wait()
	if err != nil {
		return rw, fmt.Errorf("floodgate bench: %w\n%s", err, stderr.String())
	}
	if probeErr != nil {
		return rw, fmt.Errorf("probe: %w", probeErr)
	}
	if err := json.Unmarshal(out, &rw.load); err != nil {
		return rw, fmt.Errorf("floodgate bench output: %w\n%s", err, out)
	}
	svc1, err := procCPU(svc.pid)
	if err != nil {
		return rw, err
	}
	busy1 := comp.cpu()
	after, err := readMetrics(svc.metricsURL)
	if err != nil {
		return rw, err
	}
	if conns != nil {
		conns1, err := connectionsReceived(ctx, conns)
		if err != nil {
			return rw, err
		}
		rw.redisConns = conns1 - conns0
	}
	rw.probe = probe
	rw.goroutines = maxG.Load()
	rw.serveOutcomes = make(map[string]int64)
	for o, n := range after.outcomes {
		if d := n - before.outcomes[o]; d != 0 {
			rw.serveOutcomes[o] = d
		}
	}
	rw.serviceCPU = 100 * (svc1 - svc0).Seconds() / elapsed.Seconds()
	rw.busyCPU = 100 * (busy1 - busy0).Seconds() / elapsed.Seconds()
	return rw, ctx.Err()
}

// runProbe spends fresh probe keys until ctx ends (or maxProbeRounds):
// each round sends probePerKey requests for one key from probeWorkers
// callers at once and counts what was admitted and how.
func runProbe(ctx context.Context, svc *serveProc, proto string, round *int) (probeResult, error) {
	desc := []loadgen.Descriptor{{{Key: "probe", Value: loadgen.Placeholder}}}
	var t interface {
		loadgen.Target
		Close() error
	}
	var err error
	if proto == "grpc" {
		t, err = loadgen.NewGRPC(svc.grpcAddr, "bench", desc, 1, 5*time.Second)
	} else {
		t, err = loadgen.NewHTTP(svc.httpURL, "bench", desc, probeWorkers, 5*time.Second)
	}
	if err != nil {
		return probeResult{}, err
	}
	defer t.Close()
	calls := make([]loadgen.CallFunc, probeWorkers)
	for i := range calls {
		if calls[i], err = t.NewCaller(i); err != nil {
			return probeResult{}, err
		}
	}
	res := probeResult{fewest: math.MaxInt}
	var mu sync.Mutex
	for range maxProbeRounds {
		if ctx.Err() != nil {
			break
		}
		*round++
		key := *round
		var next, ok, open, closed, errs atomic.Int64
		var wg sync.WaitGroup
		for _, call := range calls {
			wg.Go(func() {
				for next.Add(1) <= probePerKey {
					// The probe's calls are not cut by ctx: a round is
					// counted whole or not at all.
					o, err := call(context.Background(), key)
					if err != nil {
						mu.Lock()
						if res.firstError == "" {
							res.firstError = err.Error()
						}
						mu.Unlock()
					}
					switch {
					case err != nil:
						errs.Add(1)
					case o == loadgen.OK:
						ok.Add(1)
					case o == loadgen.FailedOpen:
						open.Add(1)
					case o == loadgen.FailedClosed:
						closed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		admitted := int(ok.Load() + open.Load())
		res.rounds++
		res.requests += probePerKey
		res.policy += open.Load() + closed.Load()
		res.errors += errs.Load()
		res.worst = max(res.worst, admitted)
		res.worstStore = max(res.worstStore, int(ok.Load()))
		res.fewest = min(res.fewest, admitted)
		if ok.Load() == probeLimit && open.Load() == 0 && closed.Load() == 0 && errs.Load() == 0 {
			res.exact++
		}
	}
	if res.rounds == 0 {
		res.fewest = 0
	}
	return res, nil
}

// connectionsReceived is Redis's count of connections it accepted
// (INFO stats total_connections_received).
func connectionsReceived(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO stats has no total_connections_received")
}

// metricsSnapshot is what the saturation runs read from serve's /metrics.
type metricsSnapshot struct {
	outcomes   map[string]int64 // floodgate_decisions_total by outcome
	goroutines float64          // go_goroutines
}

// readMetrics reads serve's /metrics.
func readMetrics(url string) (metricsSnapshot, error) {
	resp, err := http.Get(url)
	if err != nil {
		return metricsSnapshot{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return metricsSnapshot{}, err
	}
	return parseMetrics(string(b))
}

// parseMetrics reads floodgate_decisions_total, summed by its outcome
// label, and go_goroutines from a Prometheus text exposition.
func parseMetrics(text string) (metricsSnapshot, error) {
	m := metricsSnapshot{outcomes: make(map[string]int64)}
	for line := range strings.SplitSeq(text, "\n") {
		switch {
		case strings.HasPrefix(line, "floodgate_decisions_total{"):
			_, rest, _ := strings.Cut(line, `outcome="`)
			outcome, _, ok := strings.Cut(rest, `"`)
			if !ok {
				return m, fmt.Errorf("metrics: no outcome label in %q", line)
			}
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return m, fmt.Errorf("metrics: %q: %w", line, err)
			}
			m.outcomes[outcome] += int64(v)
		case strings.HasPrefix(line, "go_goroutines "):
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, "go_goroutines ")), 64)
			if err != nil {
				return m, fmt.Errorf("metrics: %q: %w", line, err)
			}
			m.goroutines = v
		}
	}
	return m, nil
}

// competitor is a running busy-loop process.
type competitor struct {
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{}
}

// startBusy starts benchall itself (self) as a competitor spinning pct
// percent of a core (-busy-percent); nothing for 0.
func startBusy(self string, pct int) (*competitor, error) {
	if pct == 0 {
		return &competitor{}, nil
	}
	cmd := exec.Command(self, "-busy-percent", strconv.Itoa(pct))
	cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", (pct+99)/100))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &competitor{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	return c, nil
}

// cpu is the competitor's CPU time so far.
func (c *competitor) cpu() time.Duration {
	if c.cmd == nil {
		return 0
	}
	d, _ := procCPU(c.cmd.Process.Pid)
	return d
}

// stop ends the competitor: its stdin closes, which it takes as the
// signal; after 10 s it is killed.
func (c *competitor) stop() {
	if c.cmd == nil {
		return
	}
	c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// busyLoop is the competitor's body (benchall -busy-percent pct): whole
// cores spin without rest, a remainder spins that share of every 10 ms,
// until stdin closes or busyMax passes.
func busyLoop(pct int, stdin io.Reader) {
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, stdin)
		stop.Store(true)
	}()
	deadline := time.Now().Add(busyMax)
	var wg sync.WaitGroup
	var sink atomic.Uint64
	for ; pct > 0; pct -= 100 {
		share := min(pct, 100)
		wg.Go(func() {
			const slice = 10 * time.Millisecond
			busy := slice * time.Duration(share) / 100
			x := uint64(1)
			for !stop.Load() && time.Now().Before(deadline) {
				start := time.Now()
				for time.Since(start) < busy {
					for range 1000 {
						x = x*6364136223846793005 + 1442695040888963407
					}
				}
				if rest := slice - busy; rest > 0 {
					time.Sleep(rest) // the duty cycle: idle for the rest of the slice
				}
			}
			sink.Add(x)
		})
	}
	wg.Wait()
}

func satBrief(r satRow) string {
	return fmt.Sprintf("%s %s busy=%d%%: %.0f/s p50 %s p99 %s, failure policy %d (serve %d), probe %d/%d exact, worst %d/%d, goroutines %d, Redis connections %d (load %s)",
		r.store, r.proto, r.busy, r.load.DecisionsPerSec, loadgen.FormatMS(r.load.LatencyMS.P50), loadgen.FormatMS(r.load.LatencyMS.P99),
		r.load.StoreError+r.probe.policy, r.serveFailed(), r.probe.exact, r.probe.rounds, r.probe.worst, probeLimit, r.goroutines, r.redisConns, r.loadAvg)
}

// writeSaturation prints the curve.
func writeSaturation(out io.Writer, rows []satRow) {
	fmt.Fprintln(out, "| store | protocol | competitor | decisions/s | p50 | p99 | p99.9 | errors | failure-policy answers | serve's failed_* | probe rounds exact | worst round admitted ÷ limit | store's own worst ÷ limit | max goroutines | Redis connections opened | CPU % serve / competitor | load before |")
	fmt.Fprintln(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
	for _, r := range rows {
		l := r.load.LatencyMS
		fmt.Fprintf(out, "| %s | %s | %d%% | %s | %s | %s | %s | %d | %d (%s) | %d | %d / %d | %.2f | %.2f | %d | %s | %s / %s | %s |\n",
			r.store, r.proto, r.busy, thousands(r.load.DecisionsPerSec),
			loadgen.FormatMS(l.P50), loadgen.FormatMS(l.P99), loadgen.FormatMS(l.P999), r.load.Errors+r.probe.errors,
			r.load.StoreError+r.probe.policy, pct(r.policyShare()), r.serveFailed(),
			r.probe.exact, r.probe.rounds, float64(r.probe.worst)/probeLimit, float64(r.probe.worstStore)/probeLimit,
			r.goroutines, conns(r.redisConns), num(r.serviceCPU, 0), num(r.busyCPU, 0), r.loadAvg)
	}
	fmt.Fprintln(out)
}

// conns prints a count of connections, or nothing for -1.
func conns(n int64) string {
	if n < 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// pct prints a share in percent, with more digits near zero.
func pct(f float64) string {
	switch {
	case math.IsNaN(f):
		return ""
	case f == 0:
		return "0%"
	case f < 0.001:
		return fmt.Sprintf("%.3f%%", 100*f)
	default:
		return fmt.Sprintf("%.2f%%", 100*f)
	}
}

// saturationSection runs the curve and prints its section.
func saturationSection(ctx context.Context, p plan, fg, work string, r *bench.Redis, stats *redis.Client, out io.Writer) error {
	la := loadavg()
	rows, err := saturation(ctx, p, fg, work, r, stats)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "## Saturation: `floodgate serve` with its defaults beside a busy-loop competitor (%v per step after %v of warmup)\n\n", p.satDur, p.satWarm)
	fmt.Fprintf(out, "Load average at the start of the section: %s. `floodgate serve -config DIR [-redis URL]` and nothing else: "+
		"the default deadline (-timeout %v) and failure mode (fail_open). The steady load is `floodgate bench (-grpc|-http) -c %d -keys 100000` "+
		"(descriptor user=<key>, a billion per second: never denied). The competitor is a process of its own spinning the given share of a core "+
		"(whole cores without rest, a remainder as a duty cycle of 10 ms). Beside the load, a probe sends, round after round, %d requests from %d callers "+
		"on a fresh key of %d per hour (descriptor probe=<round>, over the same protocol): a round is exact when it admitted %d, every answer the store's. "+
		"Failure-policy answers are those the clients were told came from the failure mode (gRPC header %s, JSON store_error), load and probe, "+
		"with their share of all answers; serve's failed_* is the change of its floodgate_decisions_total{outcome=~\"failed_.*|local_.*|ledger_failed\"}, "+
		"which counts per descriptor. Latency is the load's. Max goroutines: serve's go_goroutines, sampled every 100 ms.\n\n",
		la, server.DefaultTimeout, p.satCallers, probePerKey, probeWorkers, probeLimit, probeLimit, envoyrls.MetadataStoreError)
	writeSaturation(out, rows)
	return nil
}
