package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// TestDialCanceledByAnotherCall: a call whose context is live is not failed
// by the dial of another call whose context ended. rueidis dials a missing
// connection once, under the context of the call that found it missing,
// and gives every call waiting on it that dial's error; the CI run of
// 2026-12-02 failed TestConformanceSentinel/client_time/raise so ("dial
// tcp: operation was canceled"), the dial having been started by the
// cancelled context of the suite's context case. Here the interleaving is
// forced: the first dial fails (the client starts without a connection),
// the second is held until the second call waits on it, then made under
// the first call's cancelled context.
func TestDialCanceledByAnotherCall(t *testing.T) {
	addr := standaloneAddr(t)
	var dials atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true, // a client even though its first dial fails
		DisableCache:      true,
		AlwaysPipelining:  true,
		PipelineMultiplex: -1, // one connection, so both calls wait on one dial
		Dialer:            net.Dialer{Timeout: testDialTimeout},
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			switch dials.Add(1) {
			case 1:
				return nil, errors.New("the test refuses the first dial")
			case 2:
				close(entered)
				<-release
			}
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	if client == nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(client.Close)
	c := rueidisConn{client}
	eval := func(ctx context.Context) ([]int64, error) {
		return c.Eval(ctx, "return {7}", []string{testPrefix(t)}, nil, Wait{})
	}

	first, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() { _, err := eval(first); firstErr <- err }()
	<-entered
	type result struct {
		vals []int64
		err  error
	}
	second := make(chan result, 1)
	go func() { v, err := eval(t.Context()); second <- result{v, err} }()
	waitForWaiter(t, "rueidis.(*mux)._pipe(", "sync.(*WaitGroup).Wait(")
	cancel()
	close(release)

	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled call: %v, want context.Canceled", err)
	}
	r := <-second
	if r.err != nil || len(r.vals) != 1 || r.vals[0] != 7 {
		t.Fatalf("the live call behind the cancelled dial: %v, %v; want [7]", r.vals, r.err)
	}
	if n := dials.Load(); n != 3 {
		t.Errorf("%d dials, want 3 (refused, cancelled, the live call's own)", n)
	}
}

// TestDialEndedByAnother: which errors send a call again.
func TestDialEndedByAnother(t *testing.T) {
	live := t.Context()
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	canceled := dial(context.Canceled)
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"another's cancel", live, canceled, true},
		{"wrapped", live, fmt.Errorf("redisstore: %w", canceled), true},
		{"own cancel", ended, canceled, false},
		{"dial timeout", live, dial(context.DeadlineExceeded), false},
		{"refused", live, dial(errors.New("connection refused")), false},
		{"read cancelled", live, &net.OpError{Op: "read", Net: "tcp", Err: context.Canceled}, false},
		{"plain cancel", live, context.Canceled, false},
	} {
		if got := dialEndedByAnother(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: dialEndedByAnother = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// waitForWaiter returns once a goroutine is blocked in the function named
// by blocked called from the one named by frame, failing the test if that
// takes a minute (a semantic bound: the goroutine only has to be
// scheduled).
func waitForWaiter(t *testing.T, frame, blocked string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Minute); ; {
		k := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:k]), "\n\n") {
			if strings.Contains(g, frame) && strings.Contains(g, blocked) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine blocked in %s from %s after a minute", blocked, frame)
		}
		runtime.Gosched()
	}
}
