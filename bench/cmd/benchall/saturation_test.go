package main

import (
	"bytes"

	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

// TestParseMetrics reads serve's decisions by outcome, summed over their
// other labels, and its goroutines; a line without an outcome is an error.
func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(`# HELP floodgate_decisions_total decisions
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="allowed",rule="bench|user"} 900
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="failed_open",rule="bench|user"} 7
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="failed_open",rule="bench|probe"} 5
floodgate_decisions_total{algorithm="fixed_window",domain="bench",outcome="denied",rule="bench|probe"} 1e+06
go_goroutines 291
go_goroutines_other 3
`)
	if err != nil {
		t.Fatal(err)
	}
	if m.outcomes["allowed"] != 900 || m.outcomes["failed_open"] != 12 || m.outcomes["denied"] != 1_000_000 || m.goroutines != 291 {
		t.Errorf("parseMetrics = %+v, want allowed 900, failed_open 12, denied 1e6, 291 goroutines", m)
	}
	if _, err := parseMetrics(`floodgate_decisions_total{domain="bench"} 3`); err == nil {
		t.Error("a decisions line without an outcome: no error")
	}
}

// TestSaturationRow: the failure policy's share counts the load's and the
// probe's answers, serve's count sums every failure-policy outcome, and
// the table prints a row per step.
func TestSaturationRow(t *testing.T) {
	r := satRow{store: "redis", proto: "grpc", busy: 200, loadAvg: "1.00 1.00 1.00", redisConns: 0,
		load:          loadgen.Summary{Calls: 920, StoreError: 10, DecisionsPerSec: 1234, LatencyMS: loadgen.LatencyMS{P50: 1, P99: 9}},
		serveOutcomes: map[string]int64{"allowed": 900, "failed_open": 11, "failed_closed": 2, "local_allowed": 1},
		probe:         probeResult{rounds: 2, exact: 1, worst: 25, worstStore: 20, requests: 80, policy: 2}}
	if got := r.policyShare(); got != 12.0/1000 {
		t.Errorf("policyShare = %v, want 12 of 1000", got)
	}
	if got := r.serveFailed(); got != 14 {
		t.Errorf("serveFailed = %d, want 14", got)
	}
	var out bytes.Buffer
	writeSaturation(&out, []satRow{r})
	want := "| redis | grpc | 200% | 1,234 | 1ms | 9ms |"
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "| 12 (1.20%) | 14 | 1 / 2 | 1.25 | 1.00 |") {
		t.Errorf("table lacks %q or the counts:\n%s", want, &out)
	}
}

// TestBusyLoop: the competitor spins until its stdin closes, and then
// returns.
func TestBusyLoop(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan struct{})
	start := selfCPU()
	go func() { busyLoop(150, r); close(done) }()
	// Let it burn some CPU (bounded in time), then stop it.
	for deadline := time.Now().Add(5 * time.Second); selfCPU()-start < 30*time.Millisecond && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polls the process's CPU time, which the loop raises
	}
	if burnt := selfCPU() - start; burnt < 30*time.Millisecond {
		t.Errorf("the competitor burnt %v of CPU in 5 s", burnt)
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the competitor did not stop when its stdin closed")
	}
}
