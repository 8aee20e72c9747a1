package faults

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// proxied starts Redis behind a Proxy and four instances that reach it
// through the proxy.
func proxied(t *testing.T) (*redistest.Server, *Proxy, []instance) {
	t.Helper()
	r := redistest.Standalone(t)
	p, err := NewProxy(r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return r, p, instances(t, "redis://"+p.Addr(), 4)
}

// TestFaultLatencyBelowDeadline adds 30 ms to every round trip of warm
// clients, below the 100 ms deadline: every call must succeed (but for at
// most 2% that a stalled host pushes past the deadline), and those sent
// after the change take at least the 30 ms (which shows the proxy
// delayed them). A cold client needs more round trips (connect, HELLO,
// NOSCRIPT then EVAL), so latency near the deadline fails first calls.
func TestFaultLatencyBelowDeadline(t *testing.T) {
	const added = 30 * time.Millisecond
	r, p, insts := proxied(t)
	l := startLoad(t, insts, 6, ownKeys("slow"), onceLimit)
	waitFor(t, 10*time.Second, "successes before the latency", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 100
	})
	p.SetLatency(added)
	slowed := time.Now()
	waitFor(t, 20*time.Second, "300 calls under the latency", func() bool {
		return l.count(func(c call) bool { return c.start.After(slowed) }) >= 300
	})
	l.Stop()
	calls := l.Calls()
	st := measure(l, insts)
	minLatency := time.Hour
	for _, c := range calls {
		if c.start.After(slowed) {
			minLatency = min(minLatency, c.latency())
		}
	}
	if minLatency < added {
		t.Errorf("fastest call %v, below the added %v: the proxy did not delay it", minLatency, added)
	}
	double, countedFailed, missing := counted(t, r.Addr, insts, calls)
	if missing > 0 {
		t.Errorf("%d allowed calls left no count in Redis", missing)
	}
	record(t, Row{
		Fault: fmt.Sprintf("%s added to every round trip by a TCP proxy (below the deadline)", ms(added)),
		Saw: fmt.Sprintf("%d of %d calls failed; latency %s to %s under the added latency, against a %s deadline (process stalled up to %s)", st.errors, st.calls,
			ms(minLatency), ms(st.maxLatency), ms(timeout), ms(st.stall)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, RecoveryMS: -1, AddedMS: msf(added),
		Uncounted: st.uncounted, DoubleCounted: double, ServerCountedFailed: countedFailed,
	})
}

// TestFaultLatencyAboveDeadline adds 150 ms to every round trip, above the
// 100 ms deadline, then removes it: calls end at the deadline, the scripts
// they sent may still run (and count) after their callers gave up, but no
// script runs twice.
func TestFaultLatencyAboveDeadline(t *testing.T) {
	const added = 150 * time.Millisecond
	r, p, insts := proxied(t)
	l := startLoad(t, insts, 6, ownKeys("slower"), onceLimit)
	waitFor(t, 10*time.Second, "successes before the latency", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 100
	})
	slowed := time.Now()
	p.SetLatency(added)
	waitFor(t, 10*time.Second, "failed calls under the latency", func() bool {
		return l.count(func(c call) bool { return c.err != nil && c.start.After(slowed) }) >= 60
	})
	p.SetLatency(0)
	healed := time.Now()
	waitFor(t, 10*time.Second, "every instance to succeed without the latency", func() bool {
		first, _ := recovery(l.Calls(), len(insts), healed)
		return !latest(first).IsZero()
	})
	l.Stop()
	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), healed)
	other, late := afterRecovery(t, healed, errsAfter)
	double, countedFailed, missing := counted(t, r.Addr, insts, calls)
	if missing > 0 {
		t.Errorf("%d allowed calls left no count in Redis", missing)
	}
	record(t, Row{
		Fault: fmt.Sprintf("%s added to every round trip by a TCP proxy (above the deadline), then removed", ms(added)),
		Saw: fmt.Sprintf("%d of %d calls failed at the deadline, each answered by its policy; max latency %s against a %s deadline (process stalled up to %s); "+
			"no script ran twice (per-call keys counted in Redis)", st.errors, st.calls, ms(st.maxLatency), ms(timeout), ms(st.stall)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(healed)), OutageMS: msf(latest(first).Sub(slowed)),
		Uncounted: st.uncounted, DoubleCounted: double, ServerCountedFailed: countedFailed,
	})
}

// TestFaultBlackhole makes the network path to Redis stop delivering
// (the proxy holds every byte sent to Redis for an hour, with no reset or
// close, as a dropped route or a stale NAT entry would), then restores it.
// Calls end at their deadline and are answered by their policy; the
// connections that waited through the blackhole never get their answers,
// so the store recovers only once the client closes them and dials again:
// within redisstore.DefaultConnTimeout (2 s), a keepalive ping (1 s) and 1
// s of the repair, which the row's bounds assert (with rueidis's default
// of 10 s it took 11.5 s). No script runs twice.
func TestFaultBlackhole(t *testing.T) {
	r, p, insts := proxied(t)
	l := startLoad(t, insts, 6, ownKeys("blackhole"), onceLimit)
	waitFor(t, 10*time.Second, "successes before the blackhole", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 100
	})
	cut := time.Now()
	p.SetLatency(time.Hour)
	waitFor(t, 10*time.Second, "failed calls in the blackhole", func() bool {
		return l.count(func(c call) bool { return c.err != nil && c.start.After(cut) }) >= 60
	})
	p.SetLatency(0)
	healed := time.Now()
	// Recovered: no call has failed for a second, and every instance has
	// succeeded since the last failure. A client may dial a new connection
	// and succeed while calls still wait on an old one, so the last
	// failure, not the first success, marks the end.
	var settled time.Time
	waitFor(t, 30*time.Second, "a second without failures after the repair", func() bool {
		settled = healed
		for _, c := range l.Calls() {
			if c.err != nil && c.end.After(settled) {
				settled = c.end
			}
		}
		first, _ := recovery(l.Calls(), len(insts), settled)
		return time.Since(settled) > time.Second && !latest(first).IsZero()
	})
	l.Stop()
	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), settled)
	other, late := afterRecovery(t, settled, errsAfter)
	double, countedFailed, missing := counted(t, r.Addr, insts, calls)
	if missing > 0 {
		t.Errorf("%d allowed calls left no count in Redis", missing)
	}
	rec := latest(first).Sub(healed)
	record(t, Row{
		Fault: "the path to Redis stops delivering (a TCP proxy holds every byte, no reset) under load, then is restored",
		Saw: fmt.Sprintf("%d of %d calls failed (%d at the deadline, the others when the client closed their connection), each answered by its policy; max latency %s against a %s deadline (process stalled up to %s); "+
			"recovered %s after the repair (the connections that waited are closed after conn_timeout, 2 s); no script ran twice",
			st.errors, st.calls, st.deadlines, ms(st.maxLatency), ms(timeout), ms(st.stall), ms(rec)),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(rec), OutageMS: msf(latest(first).Sub(cut)),
		Uncounted: st.uncounted, DoubleCounted: double, ServerCountedFailed: countedFailed,
	})
}

// TestFaultConnectionReset resets every client connection (TCP RST) five
// times under load, as a dropped NAT entry or a restarted load balancer
// would: calls in flight fail, the clients reconnect, and no script runs
// twice.
//
// The fault ends when the last Reset returns. A client has several
// connections, and it learns of each RST only when it next reads or
// writes that connection, so after one of its calls succeeded on a new
// connection another call may still fail on a connection the proxy
// reset: that failure is the fault's, seen late, and is counted apart.
// Any other failure after recovery (on a connection made after the
// reset) breaks the bound.
func TestFaultConnectionReset(t *testing.T) {
	const resets = 5
	r, p, insts := proxied(t)
	l := startLoad(t, insts, 6, ownKeys("reset"), onceLimit)
	var last time.Time
	reset := make(map[string]bool)
	for range resets {
		since := last
		waitFor(t, 10*time.Second, "successes between resets", func() bool {
			return l.count(func(c call) bool { return c.err == nil && c.start.After(since) }) >= 100
		})
		for _, a := range p.Reset() {
			reset[a] = true
		}
		last = time.Now()
	}
	waitFor(t, 10*time.Second, "every instance to succeed after the last reset", func() bool {
		first, _ := recovery(l.Calls(), len(insts), last)
		return !latest(first).IsZero()
	})
	l.Stop()
	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), last)
	var fresh []call
	seenLate := 0
	for _, c := range errsAfter {
		if reset[localAddr(c.err)] {
			seenLate++
		} else {
			fresh = append(fresh, c)
		}
	}
	other, late := afterRecovery(t, last, fresh)
	double, countedFailed, missing := counted(t, r.Addr, insts, calls)
	if missing > 0 {
		t.Errorf("%d allowed calls left no count in Redis", missing)
	}
	if len(reset) < resets {
		t.Errorf("%d connections reset in %d resets", len(reset), resets)
	}
	saw := fmt.Sprintf("%d of %d calls failed (%d connections reset), each answered by its policy; max latency %s against a %s deadline (process stalled up to %s); "+
		"no script ran twice", st.errors, st.calls, len(reset), ms(st.maxLatency), ms(timeout), ms(st.stall))
	if seenLate > 0 {
		saw += fmt.Sprintf("; %d failed after their client had recovered, on a connection reset earlier whose RST it had not yet read", seenLate)
	}
	record(t, Row{
		Fault: fmt.Sprintf("every client connection reset (TCP RST) %d times under load", resets),
		Saw:   saw,
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(last)),
		Uncounted:  st.uncounted, DoubleCounted: double, ServerCountedFailed: countedFailed,
	})
}

// localAddr returns the local address of the connection a call failed on,
// when its error says (a *net.OpError from the client's read or write),
// or "".
func localAddr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Source != nil {
		return op.Source.String()
	}
	return ""
}
