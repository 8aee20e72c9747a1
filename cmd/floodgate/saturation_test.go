package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The saturation runs: `floodgate serve` with its default flags (and the
// memory store, or -redis) beside a busy-loop competitor process taking
// some share of the CPU, asked by concurrent HTTP clients on loopback.
// Each round spends a fresh key of a limit of satLimit per hour with
// satPerKey requests, so that what a round admits beyond satLimit is an
// overrun. A run asserts exactness (no round admits more than its limit),
// never a throughput: the decisions per second are reported, not
// checked.
//
// FLOODGATE_SATURATION_CURVE=1 runs every level (0, 50, 100, 200% of a
// core) for both stores and logs the table that docs/guarantees.md
// ("Under saturation") publishes:
//
//	FLOODGATE_SATURATION_CURVE=1 FLOODGATE_REQUIRE_REDIS=1 go test -count=1 -v -run 'TestServeSaturation' ./cmd/floodgate
const (
	satLimit   = 20
	satPerKey  = 4 * satLimit
	satWorkers = 16
	// satRounds bounds each level's run: rounds of satPerKey requests.
	satRounds = 25
	// busyMax bounds a competitor's life, should its test die without
	// stopping it.
	busyMax = 2 * time.Minute
)

// TestBusyLoopHelper is the competitor, run in a process of its own by
// startBusy: it spins FLOODGATE_BUSY_PERCENT percent of a core (whole
// cores spin without rest; a remainder spins that share of every 10 ms)
// until its stdin closes, or busyMax. Without the variable it does
// nothing.
func TestBusyLoopHelper(t *testing.T) {
	pct, err := strconv.Atoi(os.Getenv("FLOODGATE_BUSY_PERCENT"))
	if err != nil || pct <= 0 {
		return
	}
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	deadline := time.Now().Add(busyMax)
	var wg sync.WaitGroup
	spin := func(share int) {
		defer wg.Done()
		const slice = 10 * time.Millisecond
		busy := slice * time.Duration(share) / 100
		for x := uint64(1); ; {
			start := time.Now()
			for time.Since(start) < busy {
				for range 1000 {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			select {
			case <-stop:
				_ = x
				return
			default:
			}
			if time.Now().After(deadline) {
				return
			}
			if rest := slice - busy; rest > 0 {
				time.Sleep(rest)
			}
		}
	}
	for ; pct > 0; pct -= 100 {
		wg.Add(1)
		go spin(min(pct, 100))
	}
	wg.Wait()
}

// startBusy starts a competitor process spinning pct percent of a core,
// and stops it when the test ends; nothing for 0.
func startBusy(t *testing.T, pct int) {
	t.Helper()
	if pct == 0 {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBusyLoopHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FLOODGATE_BUSY_PERCENT="+strconv.Itoa(pct), fmt.Sprintf("GOMAXPROCS=%d", (pct+99)/100))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

// satResult is one level's run.
type satResult struct {
	store    string
	busy     int
	requests int
	admitted int // over every round
	worst    int // the most one round admitted
	policy   int // answered by the failure policy (store_error)
	// worstStore is the most one round admitted by the store's own
	// decisions, without the failure policy's admissions.
	worstStore    int
	elapsed       time.Duration
	loadAvgBefore string
}

func (r satResult) row() string {
	return fmt.Sprintf("| %s | %d%% | %.2f | %.2f | %.0f | %.1f%% | %s |", r.store, r.busy,
		float64(r.worst)/satLimit, float64(r.admitted)/float64(satLimit*satRounds),
		float64(r.requests)/r.elapsed.Seconds(), 100*float64(r.policy)/float64(r.requests), r.loadAvgBefore)
}

// runSaturation runs satRounds rounds against in, beside a competitor of
// busy percent of a core.
func runSaturation(t *testing.T, in *instance, store string, busy int) satResult {
	t.Helper()
	res := satResult{store: store, busy: busy, loadAvgBefore: loadAvg()}
	startBusy(t, busy)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: satWorkers}}
	defer client.CloseIdleConnections()
	start := time.Now()
	for round := range satRounds {
		key := fmt.Sprintf("sat-%s-%d-%d-%d", store, busy, round, start.UnixNano())
		body := []byte(fmt.Sprintf(`{"key": %q, "limit": {"limit": %d, "period": "1h"}}`, key, satLimit))
		var next, admitted, policy, byPolicy atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Value
		for range satWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= satPerKey {
					resp, err := client.Post(in.httpURL+"/v1/allow", "application/json", bytes.NewReader(body))
					if err != nil {
						failed.Store(err.Error())
						return
					}
					var d struct {
						Allowed    bool `json:"allowed"`
						StoreError bool `json:"store_error"`
					}
					err = json.NewDecoder(resp.Body).Decode(&d)
					resp.Body.Close()
					if err != nil {
						failed.Store(fmt.Sprintf("%d: %v", resp.StatusCode, err))
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
					if d.StoreError {
						policy.Add(1)
						if d.Allowed {
							byPolicy.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		if msg := failed.Load(); msg != nil {
			t.Fatalf("POST /v1/allow: %v", msg)
		}
		res.requests += satPerKey
		res.admitted += int(admitted.Load())
		res.policy += int(policy.Load())
		res.worst = max(res.worst, int(admitted.Load()))
		res.worstStore = max(res.worstStore, int(admitted.Load()-byPolicy.Load()))
	}
	res.elapsed = time.Since(start)
	return res
}

// loadAvg is the host's one-minute load average, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// TestServeSaturation: with its default flags, serve keeps limiting while
// a competitor takes two cores' worth of CPU (finding 3 of issue 25: 30 of
// 30 admitted against a limit of 5 before, most of them by fail_open for
// calls that had never reached the store). On the memory store, exactly:
// no round admits more than its limit and no answer is the failure
// policy's, since the store takes no deadline. On Redis, no silent
// overrun: the store's own decisions admit no more than the limit, and
// every admission beyond it is a fail_open answer marked store_error (a
// round trip that truly took longer than the deadline, counted in
// floodgate_store_errors_total); their share is reported, not asserted,
// as it depends on the host.
func TestServeSaturation(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run")
	}
	levels := []int{200}
	curve := os.Getenv("FLOODGATE_SATURATION_CURVE") != ""
	if curve {
		levels = []int{0, 50, 100, 200}
	}
	var rows []string
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			args := strings.Fields(os.Getenv("FLOODGATE_SATURATION_ARGS"))
			if store == "redis" {
				args = append(args, "-redis", "redis://"+redistest.Standalone(t).Addr)
			}
			in := startServe(t, args...)
			for _, busy := range levels {
				t.Run(fmt.Sprintf("busy=%d%%", busy), func(t *testing.T) {
					res := runSaturation(t, in, store, busy)
					rows = append(rows, res.row())
					t.Log(res.row())
					if res.worstStore > satLimit {
						t.Errorf("the store's own decisions admitted %d in a round against a limit of %d", res.worstStore, satLimit)
					}
					if store == "memory" && (res.worst > satLimit || res.policy > 0) {
						t.Errorf("a round admitted %d against a limit of %d, %d of %d answers by the failure policy (load %s, GOMAXPROCS %d); the memory store takes no deadline",
							res.worst, satLimit, res.policy, res.requests, res.loadAvgBefore, runtime.GOMAXPROCS(0))
					}
				})
			}
		})
	}
	if curve {
		t.Logf("\n| store | competitor | worst admitted ÷ limit | mean admitted ÷ limit | decisions/s | failure-policy answers | load before |\n|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
	}
}

// TestServeFirstReserveUnderLoad: with the default -timeout, the first
// reservation of a new durable key (a script that finds no counter, a
// ledger read, a second script) is answered with its id, or marked as a
// store failure, never allowed silently without one, while a competitor
// takes two cores' worth of CPU (issue 30 item 1: allowed with
// store_error and no id on a busy machine). The ledger's read is bounded
// by the ledger's own deadline and each script by the store's from its
// send (ledger's TestQuotasKeepStoreDeadlineRule asserts that rule
// exactly); how many of the 20 got their id is logged, not asserted, as
// it depends on the host's speed (all 20 in runs without -race at load
// 7-13).
func TestServeFirstReserveUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a load run")
	}
	redis := redistest.Standalone(t)
	dir, _ := writeConfig(t, paidYAML)
	in := startServe(t, "-config", dir, "-redis", "redis://"+redis.Addr, "-ledger", filepath.Join(t.TempDir(), "ledger.db"))
	startBusy(t, 200)
	withID := 0
	for i := range 20 {
		body := fmt.Sprintf(`{"domain":"billing","descriptors":[{"entries":[{"key":"tenant","value":"first-%d"}]}],"hits":1}`, i)
		resp, err := http.Post(in.httpURL+"/v1/reservations", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct {
			ID         string `json:"id"`
			Allowed    bool   `json:"allowed"`
			StoreError bool   `json:"store_error"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("reserve %d: %d %s", i, resp.StatusCode, b)
		}
		switch {
		case out.Allowed && out.ID != "" && !out.StoreError:
			withID++
		case out.StoreError && out.ID == "":
		default:
			t.Errorf("the first reserve of tenant first-%d under load: %d %s, want an id, or store_error without one", i, resp.StatusCode, b)
		}
	}
	t.Logf("%d of 20 first reserves of new durable keys got their id beside a 200%% competitor (load %s)", withID, loadAvg())
}
