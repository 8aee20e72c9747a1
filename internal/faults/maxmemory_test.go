package faults

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestFaultMaxmemory fills Redis to its maxmemory under the noeviction
// policy with keys of their own, then raises the limit. Redis refuses every
// script that may write with an OOM error; the callers see it, answered
// by their policy.
func TestFaultMaxmemory(t *testing.T) {
	r := redistest.Standalone(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
	insts := instances(t, "redis://"+r.Addr, 4)
	l := startLoad(t, insts, 6, ownKeys("oom"), onceLimit)
	waitFor(t, 10*time.Second, "successes before the limit", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 100
	})
	used, err := strconv.Atoi(info(t, r, "memory")["used_memory"])
	if err != nil {
		t.Fatal(err)
	}
	// About 1500 more keys of ~100 bytes each.
	r.MustCLI(t, "CONFIG", "SET", "maxmemory", strconv.Itoa(used+256<<10))
	limited := time.Now()
	waitFor(t, 20*time.Second, "calls refused at maxmemory", func() bool {
		return l.count(func(c call) bool { return c.err != nil && c.start.After(limited) && isOOM(c.err) }) >= 60
	})
	r.MustCLI(t, "CONFIG", "SET", "maxmemory", "0")
	raised := time.Now()
	waitFor(t, 10*time.Second, "every instance to succeed after the limit is raised", func() bool {
		first, _ := recovery(l.Calls(), len(insts), raised)
		return !latest(first).IsZero()
	})
	l.Stop()

	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), raised)
	other, late := afterRecovery(t, raised, errsAfter)
	var oom int
	var sample string
	for _, c := range calls {
		if c.err != nil && isOOM(c.err) {
			oom++
			sample = c.err.Error()
		}
	}
	t.Logf("an OOM error as callers see it: %s", sample)
	record(t, Row{
		Fault: "maxmemory reached with maxmemory-policy noeviction, then raised",
		Saw: fmt.Sprintf("%d of %d calls failed, %d with Redis's OOM error (\"OOM command not allowed when used memory > 'maxmemory'\"), "+
			"each answered by its policy; max latency %s against a %s deadline (process stalled up to %s)", st.errors, st.calls, oom,
			ms(st.maxLatency), ms(timeout), ms(st.stall)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(raised)),
		Uncounted:  st.uncounted, OOMErrors: oom,
	})
}

func isOOM(err error) bool { return strings.Contains(err.Error(), "OOM") }
