package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
)

// windowLimit is the limit of the faults that measure admissions above
// it: 50 per 500 ms fixed window, filled within a few ms by the load.
var windowLimit = floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 50, Period: 500 * time.Millisecond}

// TestFaultKill SIGKILLs Redis (no persistence) under load and restarts
// it on the same port. Four Limiters (two FailOpen, two FailClosed) and a
// server.Server share it.
func TestFaultKill(t *testing.T) {
	r := redistest.Standalone(t)
	insts := instances(t, "redis://"+r.Addr, 4)
	srv, err := server.New(server.Options{Store: insts[0].store, Limiter: floodgate.Options{Timeout: timeout, FailurePolicy: floodgate.FailClosed}})
	if err != nil {
		t.Fatal(err)
	}
	keys := keysOf("a", "b")
	l := startLoad(t, insts, 6, keys, windowLimit)

	// The service, beside the library: DecideInline through the same store.
	type srvCall struct {
		start, end time.Time
		err        error
		code       server.Code
	}
	var srvCalls []srvCall
	srvDone := make(chan struct{})
	stopSrv := make(chan struct{})
	go func() {
		defer close(srvDone)
		ticker := time.NewTicker(5 * time.Millisecond)
		defer ticker.Stop()
		for end := time.Now().Add(maxLoad); time.Now().Before(end); {
			select {
			case <-stopSrv:
				return
			case <-ticker.C:
			}
			c := srvCall{start: time.Now()}
			ctx, cancel := context.WithDeadline(context.Background(), c.start.Add(timeout))
			st, err := srv.DecideInline(ctx, "svc", windowLimit, 1)
			c.end, c.err, c.code = time.Now(), st.Err, st.Code
			cancel()
			if err != nil {
				c.err = err
			}
			srvCalls = append(srvCalls, c)
		}
	}()
	defer func() {
		select {
		case <-stopSrv:
		default:
			close(stopSrv)
		}
		<-srvDone
	}()

	waitFor(t, 10*time.Second, "successes before the kill", func() bool {
		return l.count(func(c call) bool { return c.err == nil }) >= 200
	})
	killed := time.Now()
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "failed calls while Redis is down", func() bool {
		return l.count(func(c call) bool { return c.err != nil && c.start.After(killed) }) >= 100
	})
	if err := r.Restart(t); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, 10*time.Second, "every instance to succeed after the restart", func() bool {
		first, _ := recovery(l.Calls(), len(insts), restarted)
		return !latest(first).IsZero()
	})
	recovered := time.Now()
	// Keep going into the next windows: two more periods of load.
	waitFor(t, 10*time.Second, "two periods after recovery", func() bool {
		return l.count(func(c call) bool { return c.err == nil && c.start.After(recovered.Add(2*windowLimit.Period)) }) > 0
	})
	l.Stop()
	close(stopSrv)
	<-srvDone

	// The restarted Redis had no scripts: it answered NOSCRIPT, and the
	// store sent EVAL, which no caller saw.
	noscripts := info(t, r, "errorstats")["errorstat_NOSCRIPT"]
	if !strings.HasPrefix(noscripts, "count=") {
		t.Errorf("the restarted Redis never answered NOSCRIPT (errorstats %q): the fallback was not exercised", noscripts)
	}

	calls := l.Calls()
	st := measure(l, insts)
	first, errsAfter := recovery(calls, len(insts), restarted)
	other, late := afterRecovery(t, restarted, errsAfter)
	overrun, maxWindow, bad := windows(calls, windowLimit, span(killed, latest(first), windowLimit.Period))

	// The service: every failed call denied (fail_closed) within the deadline.
	var srvErrs, srvWrong int
	var srvMax time.Duration
	for _, c := range srvCalls {
		srvMax = max(srvMax, c.end.Sub(c.start))
		if c.err != nil {
			srvErrs++
			if c.code != server.OverLimit {
				srvWrong++
			}
		}
	}
	if srvErrs == 0 || srvWrong > 0 || srvMax > timeout+slack+st.stall {
		t.Errorf("server: %d calls, %d failed, %d of them not denied, max latency %v", len(srvCalls), srvErrs, srvWrong, srvMax)
	}
	t.Logf("server.Server: %d calls, %d failed (all denied by fail_closed), max latency %v", len(srvCalls), srvErrs, srvMax)

	record(t, Row{
		Fault: "Redis SIGKILLed under load, restarted without persistence",
		Saw: fmt.Sprintf("%d of %d calls failed while Redis was down, each answered by its policy "+
			"(fail_open allowed, fail_closed denied, server.Server denied %d of %d); max latency %s against a %s deadline (process stalled up to %s); "+
			"after recovery %d errors, %d deadlines met on the loaded host; the restarted Redis answered NOSCRIPT %s times, no caller saw it", st.errors, st.calls, srvErrs, len(srvCalls), ms(st.maxLatency), ms(timeout), ms(st.stall), other, late, strings.TrimPrefix(noscripts, "count=")),
		Calls: st.calls, Errors: st.errors, Deadlines: st.deadlines,
		TimeoutMS: msf(timeout), MaxLatencyMS: msf(st.maxLatency), StallMS: msf(st.stall),
		WrongPolicy: st.wrongPolicy, ErrorsAfterRecovery: other, TimeoutsAfterRecovery: late, NoScript: st.noscript,
		RecoveryMS: msf(latest(first).Sub(restarted)), OutageMS: msf(latest(first).Sub(killed)),
		Limit: windowLimit.Limit, Overrun: overrun, MaxWindow: maxWindow, BadWindows: bad,
		Uncounted: st.uncounted,
	})
}

func msf(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}
