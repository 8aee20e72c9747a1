package faults

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// onceLimit is the limit of the faults that check what Redis counted:
// each call has a key of its own, so its key's count says whether the
// script ran (1), ran twice (2) or never ran (no key). FirstHit windows
// keep every key a full minute, whatever the calendar minute.
var onceLimit = floodgate.Limit{Algorithm: floodgate.FixedWindow, Window: floodgate.FirstHit, Limit: 10, Period: time.Minute}

// ownKeys gives every call a key of its own.
func ownKeys(prefix string) keyFunc {
	return func(w, i int) string { return fmt.Sprintf("%s-%d-%d", prefix, w, i) }
}

// counted reads the count Redis holds for each call's key and returns the
// calls counted twice or more, the failed calls counted once, and the
// allowed calls not counted at all.
func counted(t *testing.T, addr string, insts []instance, calls []call) (double, countedFailed, missing int) {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const chunk = 500
	for i := 0; i < len(calls); i += chunk {
		part := calls[i:min(i+chunk, len(calls))]
		keys := make([]string, len(part))
		for j, cl := range part {
			// A first-hit window's state is the string <start>:<count>
			// at the key's ":f" (docs/redis.md, "Keys").
			keys[j] = insts[0].store.Key(cl.key, onceLimit) + ":f"
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		vals, err := c.Do(ctx, c.B().Mget().Key(keys...).Build()).ToArray()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range vals {
			var n int64
			if s, err := v.ToString(); err == nil {
				_, cnt, ok := strings.Cut(s, ":")
				if n, err = strconv.ParseInt(cnt, 10, 64); !ok || err != nil {
					t.Fatalf("state %q of %s is not <start>:<count>", s, keys[j])
				}
			}
			cl := part[j]
			switch {
			case n > 1:
				double++
			case n == 1 && cl.err != nil:
				countedFailed++
			case n == 0 && cl.err == nil && cl.allowed:
				missing++
			}
		}
	}
	return double, countedFailed, missing
}

// leakBaseline warms the instances up with a short load, so that every
// connection and background goroutine exists, and returns the goroutine
// count and Redis's connected_clients.
func leakBaseline(t *testing.T, r *redistest.Server, insts []instance) (goroutines, conns int) {
	t.Helper()
	warm := startLoad(t, insts, 6, ownKeys("warm"), onceLimit)
	waitFor(t, 10*time.Second, "warm-up calls", func() bool {
		return warm.count(func(c call) bool { return c.err == nil }) >= 200
	})
	warm.Stop()
	return countGoroutines(), connectedClients(t, r)
}

// countGoroutines counts this process's goroutines but for those that serve a
// rueidis connection (each connection has a reader and a writer, started
// when the connection is first used, so their number at the baseline
// depends on which connections the warm-up happened to use). Connections
// are counted on their own, by Redis; what is left is every goroutine a
// call or the store starts, whose leak this detects.
func countGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "rueidis.(*pipe)._background") {
			count++
		}
	}
	return count
}

func connectedClients(t *testing.T, r *redistest.Server) int {
	t.Helper()
	n, err := strconv.Atoi(info(t, r, "clients")["connected_clients"])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// leaks polls for up to 5 s until the goroutines and connections are back
// to their baseline, and returns how many are above it then.
func leaks(t *testing.T, r *redistest.Server, goroutines, conns int) (extraG, extraC int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		extraG = countGoroutines() - goroutines
		extraC = connectedClients(t, r) - conns
		if (extraG <= 0 && extraC <= 0) || time.Now().After(deadline) {
			return extraG, extraC
		}
		time.Sleep(20 * time.Millisecond) // polling the runtime and an external process
	}
}

// pauseFault runs load through a Redis that pause stops for longer than
// the deadline and resume continues, and records what the callers saw.
func pauseFault(t *testing.T, fault string, pause, resume func(*redistest.Server)) {
	r := redistest.Standalone(t)
	insts := instances(t, "redis://"+r.Addr, 4)
	g0, c0 := leakBaseline(t, r, insts)

	l := startLoad(t, insts, 6, ownKeys("p"), onceLimit)
	waitFor(t, 10*time.Second, "successes before the pause", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 100
	})
	paused := time.Now()
	pause(r)
	waitFor(t, 10*time.Second, "five deadlines of pause with failed calls", func() bool {
		return time.Since(paused) > 5*timeout && l.count(func(c call) bool { return c.err != nil }) >= 20
	})
	resume(r)
	resumed := time.Now()
	waitFor(t, 10*time.Second, "every instance to succeed after the pause", func() bool {
		first, _ := recovery(l.Calls(), len(insts), resumed)
		return !latest(first).IsZero()
	})
	l.Stop()

	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), resumed)
	other, late := afterRecovery(t, resumed, errsAfter)
	double, countedFailed, missing := counted(t, r.Addr, insts, calls)
	if missing > 0 {
		t.Errorf("%d allowed calls left no count in Redis", missing)
	}
	extraG, extraC := leaks(t, r, g0, c0)
	record(t, Row{
		Fault: fault,
		Saw: fmt.Sprintf("%d of %d calls failed at the deadline, each answered by its policy; max latency %s against a %s deadline (process stalled up to %s); "+
			"goroutines (besides each connection's reader and writer) and connections back to their baseline (%d, %d) after the load", st.errors, st.calls,
			ms(st.maxLatency), ms(timeout), ms(st.stall), g0, c0),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(resumed)), OutageMS: msf(latest(first).Sub(paused)),
		Uncounted: st.uncounted, GoroutinesLeaked: extraG, ConnsLeaked: extraC,
		DoubleCounted: double, ServerCountedFailed: countedFailed,
	})
}

// TestFaultPauseSIGSTOP stops Redis with SIGSTOP for longer than the
// deadline: a hung server, or a host that froze.
func TestFaultPauseSIGSTOP(t *testing.T) {
	pauseFault(t, "Redis stopped (SIGSTOP) for more than 5 deadlines, then continued",
		func(r *redistest.Server) {
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
		},
		func(r *redistest.Server) {
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
		})
}

// TestFaultClientPause pauses writes with CLIENT PAUSE WRITE (as a
// manual failover does) for longer than the deadline: Redis holds the
// scripts and runs them when the pause ends, after their callers gave up.
func TestFaultClientPause(t *testing.T) {
	pauseFault(t, "CLIENT PAUSE WRITE for more than 5 deadlines, then CLIENT UNPAUSE",
		func(r *redistest.Server) { r.MustCLI(t, "CLIENT", "PAUSE", "10000", "WRITE") },
		func(r *redistest.Server) { r.MustCLI(t, "CLIENT", "UNPAUSE") })
}
