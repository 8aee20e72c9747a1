package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/faults"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// gateConn holds every script whose keys name "slow" until release is
// closed (or its context ends), as a slow run in flight would.
type gateConn struct {
	Conn
	entered chan struct{}
	release chan struct{}
}

func (c gateConn) EvalSHA(ctx context.Context, sha string, keys, args []string, w Wait) ([]int64, error) {
	if len(keys) > 0 && strings.Contains(keys[0], "slow") {
		c.entered <- struct{}{}
		select {
		case <-c.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return c.Conn.EvalSHA(ctx, sha, keys, args, w)
}

// TestDeadlineFromSend: a Limiter's Timeout bounds a script from its send,
// not the time its call waited in this process for a run to come back
// (finding 3 of issue 25: on a saturated host most calls answered by
// fail_open had never been sent). A call queued behind a run in flight
// for five times its deadline is still decided by Redis once it is sent,
// and a run in flight past its own deadline still fails.
func TestDeadlineFromSend(t *testing.T) {
	gate := gateConn{Conn: rueidisConn{newRueidis(t, standaloneAddr(t))}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	s, err := NewWithConn(gate, &Options{Prefix: testPrefix(t), Coalesce: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Long enough for a script's round trip on a loaded 2-core machine:
	// once sent, the queued call must be decided by Redis.
	const timeout = 200 * time.Millisecond
	l, err := floodgate.New(s, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 1, Period: time.Hour}
	// The run in flight: no deadline of the Limiter's.
	slow := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), floodgate.Request{Key: "slow", Limit: lim, Cost: 1})
		slow <- err
	}()
	<-gate.entered
	type answer struct {
		d   floodgate.Decision
		err error
	}
	queued := make(chan answer, 1)
	go func() {
		d, err := l.Allow(t.Context(), "fast", lim)
		queued <- answer{d, err}
	}()
	// The time under test: five deadlines of the queued call's wait.
	time.Sleep(5 * timeout)
	select {
	case a := <-queued:
		t.Fatalf("a call waiting for a run answered before it was sent: %+v %v", a.d, a.err)
	default:
	}
	close(gate.release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if a := <-queued; a.err != nil || !a.d.Allowed {
		t.Errorf("the queued call once sent: %+v %v, want Redis's admission", a.d, a.err)
	}
	if d, err := l.Allow(t.Context(), "fast", lim); err != nil || d.Allowed {
		t.Errorf("the second call on a limit of 1: %+v %v, want Redis's denial", d, err)
	}

	// A script in flight past its deadline fails, and is answered by the
	// policy.
	gate.release = make(chan struct{})
	defer close(gate.release)
	s2, err := NewWithConn(gate, &Options{Prefix: testPrefix(t) + "2"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	l2, err := floodgate.New(s2, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan answer, 1)
	go func() {
		d, err := l2.Allow(t.Context(), "slow", lim)
		done <- answer{d, err}
	}()
	<-gate.entered
	if a := <-done; !errors.Is(a.err, context.DeadlineExceeded) || !a.d.Allowed {
		t.Errorf("a script in flight past its deadline: %+v %v, want fail_open's answer with the deadline's error", a.d, a.err)
	}
}

// TestDeadlineKeepsConnection: with the client options of Open, a script
// that passes its deadline fails (answered by the failure policy) and
// leaves its connection open, also on a connection with nothing else in
// flight. Before (rueidis's default), rueidis read such a reply under a
// socket deadline and closed the connection when it passed: on a saturated host each late
// reply failed every call in flight on that connection and made the next
// one dial again, its handshake under the next call's deadline (the
// saturation curve of bench/run-all.sh -saturation showed 13 connections
// opened in 5 s at load 24). A real redis-server behind a loopback proxy
// that holds the client's bytes for 50 times the deadline; whether Redis
// accepted a new connection is read from its INFO.
func TestDeadlineKeepsConnection(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy, err := faults.NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct := newRueidis(t, srv.Addr)
	connections := func() int64 {
		t.Helper()
		info, err := direct.Do(t.Context(), direct.B().Info().Section("stats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("INFO stats has no total_connections_received")
		return 0
	}
	// The client of Open's options, on one connection (rueidis's default
	// is four, picked at random per call), so that every call below goes
	// on the same one.
	cfg, err := parseURL("redis://" + proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.clientOption(nil)
	o.PipelineMultiplex, o.Dialer = -1, net.Dialer{Timeout: testDialTimeout}
	client, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := New(client, &Options{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const timeout = 20 * time.Millisecond
	l, err := floodgate.New(s, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 10, Period: time.Hour}
	// On a loaded host the late call's deadline can pass before rueidis
	// has queued it; rueidis then sends nothing, and this attempt shows
	// nothing about a late reply. Such an attempt is seen by its key's
	// count (one less taken) and tried again on a fresh key, up to 20
	// times; the test fails if no late call was ever sent.
	for attempt := range 20 {
		key := fmt.Sprintf("k%d", attempt)
		req := floodgate.Request{Key: key, Limit: lim, Cost: 1}
		// One call without a deadline or a cancellation opens the
		// connection; without Open's AlwaysPipelining, rueidis would send
		// and read it on the caller's goroutine, as every call on a
		// connection that never had two at once.
		if d, err := s.Apply(context.Background(), req); err != nil || d.Remaining != 9 {
			t.Fatalf("first call: %+v %v, want 9 remaining", d, err)
		}
		before := connections()

		proxy.SetLatency(50 * timeout)
		d, err := l.Allow(t.Context(), key, lim)
		if !errors.Is(err, context.DeadlineExceeded) || !d.Allowed {
			t.Fatalf("a script held past its deadline: %+v %v, want fail_open's answer with the deadline's error", d, err)
		}
		proxy.SetLatency(0)
		// The next call goes after the late one on the same connection:
		// it waits for it, and is decided by Redis, which ran the late
		// one too.
		d, err = s.Apply(t.Context(), req)
		if err == nil && d.Remaining == 8 {
			t.Logf("attempt %d: the late call's deadline passed before it was sent; again", attempt)
			continue
		}
		if err != nil || d.Remaining != 7 {
			t.Fatalf("the call after the late one: %+v %v, want Redis's decision with 7 remaining (the late script ran)", d, err)
		}
		if after := connections(); after != before {
			t.Errorf("Redis accepted %d connections after a script passed its deadline, want none: the deadline closed the connection", after-before)
		}
		return
	}
	t.Fatal("in 20 attempts no late call was sent before its deadline passed")
}

// fakeTimers is a clock and the timers of startDeadline, moved by hand.
type fakeTimers struct {
	now   time.Time
	f     func()        // the timer's function
	due   time.Duration // what it was last set for (from now at the time)
	sets  int
	alive bool
}

func (ft *fakeTimers) clock() time.Time { return ft.now }

func (ft *fakeTimers) after(d time.Duration, f func()) stoppableTimer {
	ft.f, ft.due, ft.alive = f, d, true
	ft.sets++
	return ft
}

func (ft *fakeTimers) Stop() bool { was := ft.alive; ft.alive = false; return was }

func (ft *fakeTimers) Reset(d time.Duration) bool {
	ft.due, ft.alive = d, true
	ft.sets++
	return false
}

// fireAfter moves the clock by elapsed and fires the timer, as a timer
// set for ft.due fires, elapsed late or on time.
func (ft *fakeTimers) fireAfter(t *testing.T, elapsed time.Duration) {
	t.Helper()
	if !ft.alive {
		t.Fatal("the timer is not set")
	}
	ft.now = ft.now.Add(elapsed)
	ft.alive = false
	ft.f()
}

// TestDeadlineCredit: a script's deadline passes when its timer fires on
// time; a timer that fires late (the process waited for a CPU) is set
// again for its lateness, up to one more timeout in all, so that a reply
// that came in time is not thrown away for the time this process could
// not run; past that credit, or on a timer on time, the deadline passes
// (context.DeadlineExceeded). An injected clock and timers.
func TestDeadlineCredit(t *testing.T) {
	const timeout = 10 * time.Millisecond
	start := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	open := func(t *testing.T) (*fakeTimers, context.Context, context.CancelFunc) {
		ft := &fakeTimers{now: start}
		ctx, cancel := startDeadline(context.Background(), timeout, ft.clock, ft.after)
		if ft.due != timeout {
			t.Fatalf("timer set for %v, want %v", ft.due, timeout)
		}
		if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(2*timeout)) {
			t.Errorf("Deadline() = %v %v, want the latest it can pass, %v", d, ok, start.Add(2*timeout))
		}
		return ft, ctx, cancel
	}
	passed := func(t *testing.T, ctx context.Context, want bool) {
		t.Helper()
		if got := ctx.Err() != nil; got != want {
			t.Fatalf("deadline passed: %v (%v), want %v", got, ctx.Err(), want)
		}
		if want && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err() = %v, want context.DeadlineExceeded", ctx.Err())
		}
	}

	t.Run("on time", func(t *testing.T) {
		ft, ctx, cancel := open(t)
		defer cancel()
		ft.fireAfter(t, timeout+lateSlack) // late by the slack: on time
		passed(t, ctx, true)
	})
	t.Run("late, then on time", func(t *testing.T) {
		ft, ctx, cancel := open(t)
		defer cancel()
		ft.fireAfter(t, timeout+3*time.Millisecond)
		passed(t, ctx, false)
		if ft.due != 3*time.Millisecond {
			t.Fatalf("set again for %v, want its lateness, 3ms", ft.due)
		}
		ft.fireAfter(t, 3*time.Millisecond)
		passed(t, ctx, true)
	})
	t.Run("late until the credit is spent", func(t *testing.T) {
		ft, ctx, cancel := open(t)
		defer cancel()
		ft.fireAfter(t, timeout+4*time.Millisecond)
		ft.fireAfter(t, 4*time.Millisecond+4*time.Millisecond)
		passed(t, ctx, false)
		// 8ms of the 10ms credited; 2ms left for the next 5ms late.
		ft.fireAfter(t, ft.due+5*time.Millisecond)
		passed(t, ctx, false)
		if ft.due != 2*time.Millisecond {
			t.Fatalf("set again for %v, want the credit left, 2ms", ft.due)
		}
		ft.fireAfter(t, ft.due+5*time.Millisecond)
		passed(t, ctx, true)
		if ft.sets != 4 {
			t.Errorf("timer set %d times, want 4", ft.sets)
		}
	})
	t.Run("very late", func(t *testing.T) {
		ft, ctx, cancel := open(t)
		defer cancel()
		ft.fireAfter(t, timeout+time.Second)
		passed(t, ctx, false)
		if ft.due != timeout {
			t.Fatalf("set again for %v, want the whole credit, %v", ft.due, timeout)
		}
		ft.fireAfter(t, ft.due+time.Second)
		passed(t, ctx, true)
	})
	t.Run("canceled", func(t *testing.T) {
		ft, ctx, cancel := open(t)
		cancel()
		if !errors.Is(ctx.Err(), context.Canceled) || ft.alive {
			t.Errorf("after cancel: Err() = %v, timer set %v; want context.Canceled and the timer stopped", ctx.Err(), ft.alive)
		}
	})
	t.Run("parent's deadline", func(t *testing.T) {
		// A parent's deadline before the script's is the Deadline; the
		// parent's end is the context's, whatever the timer.
		ft := &fakeTimers{now: start}
		parent, cancelParent := context.WithDeadline(context.Background(), start.Add(timeout/2))
		defer cancelParent()
		ctx, cancel := startDeadline(parent, timeout, ft.clock, ft.after)
		defer cancel()
		if d, _ := ctx.Deadline(); !d.Equal(start.Add(timeout / 2)) {
			t.Errorf("Deadline() = %v, want the parent's, earlier", d)
		}
		<-ctx.Done() // start is long past: the parent's deadline has passed
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !ft.alive {
			t.Errorf("Err() = %v, timer set %v: want the parent's context.DeadlineExceeded, the timer not fired", ctx.Err(), ft.alive)
		}
	})
	t.Run("parent canceled", func(t *testing.T) {
		ft := &fakeTimers{now: start}
		parent, cancelParent := context.WithCancel(context.Background())
		ctx, cancel := startDeadline(parent, timeout, ft.clock, ft.after)
		defer cancel()
		cancelParent()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Errorf("Err() = %v, want the parent's context.Canceled", ctx.Err())
		}
	})
}
