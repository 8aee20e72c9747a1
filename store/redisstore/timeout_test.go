package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
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
	const timeout = 20 * time.Millisecond
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
