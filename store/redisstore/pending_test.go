package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	iloop "github.com/floodgate-rl/floodgate/internal/loop"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// manualTicker is a loop ticker whose ticks the test sends.
type manualTicker struct{ c chan time.Time }

func (m manualTicker) C() <-chan time.Time { return m.c }
func (manualTicker) Stop()                 {}

// TestPending: a Pending store opened while Redis is down fails every
// call, and Ping, with an error that says so and wraps the last try's,
// and each try that fails is reported; once Redis is up, the next try
// opens the store, OnOpen hears of it, the tries stop, and every call
// goes to Redis.
func TestPending(t *testing.T) {
	redis := redistest.Standalone(t)
	if err := redis.Kill(); err != nil {
		t.Fatal(err)
	}
	url := "redis://" + redis.Addr
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, first := Open(ctx, url, nil)
	cancel()
	if first == nil || !Retryable(first) {
		t.Fatalf("Open of a Redis that is down: %v; want an error Retryable says is worth waiting out", first)
	}
	tick := manualTicker{make(chan time.Time)}
	tried, opened := make(chan error, 1), make(chan struct{})
	p := openPending(url, &Options{Prefix: testPrefix(t)}, first, &PendingOptions{
		RetryEvery: time.Minute,
		OnError:    func(err error) { tried <- err },
		OnOpen:     func() { close(opened) },
	}, func(time.Duration) iloop.Ticker { return tick })
	defer p.Close()

	lim := floodgate.Limit{Limit: 2, Period: time.Hour}
	req := floodgate.Request{Key: "k", Limit: lim, Cost: 1}
	notYet := func(err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "Redis not connected yet (retrying every 1m0s)") {
			t.Errorf("a call before the store is open: %v, want not connected yet", err)
		}
	}
	_, err := p.Apply(t.Context(), req)
	notYet(err)
	if !errors.Is(err, first) {
		t.Errorf("the error %v does not wrap the first try's, %v", err, first)
	}
	notYet(p.Ping(t.Context()))
	notYet(p.Reset(t.Context(), "k", lim))
	_, errs := p.ApplyPipelined(t.Context(), []floodgate.Request{req, req})
	if len(errs) != 2 {
		t.Fatalf("ApplyPipelined: %d errors for 2 requests", len(errs))
	}
	notYet(errs[0])
	notYet(errs[1])
	if p.Store() != nil {
		t.Fatal("Store() before a try opened it: not nil")
	}

	tick.c <- time.Now() // Redis still down: the try fails
	second := <-tried
	if !Retryable(second) {
		t.Errorf("a try with Redis down: %v, not Retryable", second)
	}
	if _, err := p.Apply(t.Context(), req); !errors.Is(err, second) {
		t.Errorf("after a failed try: %v, want it to wrap the try's error %v", err, second)
	}

	if err := redis.Restart(t); err != nil {
		t.Fatal(err)
	}
	tick.c <- time.Now()
	<-opened
	<-p.loop.Done() // the tries stopped
	if p.Store() == nil {
		t.Fatal("Store() once opened: nil")
	}
	for i, want := range []bool{true, true, false} {
		d, err := p.Apply(t.Context(), req)
		if err != nil || d.Allowed != want {
			t.Fatalf("call %d once open: %+v, %v; want allowed %v", i+1, d, err, want)
		}
	}
	if err := p.Ping(t.Context()); err != nil {
		t.Errorf("Ping once open: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Store().Apply(t.Context(), req); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("the store after Close: %v, want ErrClosed", err)
	}
}

// TestPendingCloseBeforeOpen: Close of a Pending store that never opened
// stops its tries and returns.
func TestPendingCloseBeforeOpen(t *testing.T) {
	t.Parallel()
	p := openPending("redis://127.0.0.1:1", nil, errors.New("refused"), nil,
		func(time.Duration) iloop.Ticker { return manualTicker{make(chan time.Time)} })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(t.Context(), floodgate.Request{}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a call after Close: %v, want the last try's error", err)
	}
}

// TestRetryable: errors of Open that waiting may cure are retryable; a
// mistake in the URL or the options is not.
func TestRetryable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := Open(ctx, "redis://127.0.0.1:1", nil) // nothing listens on port 1
	if err == nil || !Retryable(err) {
		t.Errorf("Open of a port where nothing listens: %v, want Retryable", err)
	}
	_, err = Open(ctx, "nosuch://x", nil)
	if err == nil || Retryable(err) {
		t.Errorf("Open of a bad URL: %v, want an error that is not Retryable", err)
	}
	for _, err := range []error{context.DeadlineExceeded, ErrBadURL, ErrClientCertificate} {
		if got, want := Retryable(err), err == context.DeadlineExceeded; got != want {
			t.Errorf("Retryable(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestPendingWaitsForOpen: a call that comes before the store is open
// waits for it within its deadline (finding 4 of issue 25: the first
// calls after start failed open before the Redis dial completed): a
// Limiter's call made while Redis comes up is decided by Redis once the
// try opens the store, and one whose deadline ends first fails with
// ErrStore, answered by the failure policy.
func TestPendingWaitsForOpen(t *testing.T) {
	redis := redistest.Standalone(t)
	url := "redis://" + redis.Addr
	tick := manualTicker{make(chan time.Time)}
	p := openPending(url, &Options{Prefix: testPrefix(t)}, errors.New("refused"), &PendingOptions{RetryEvery: time.Minute},
		func(time.Duration) iloop.Ticker { return tick })
	defer p.Close()
	lim := floodgate.Limit{Limit: 1, Period: time.Hour}

	// A deadline that ends before any try: the policy's answer.
	short, err := floodgate.New(p, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := short.Allow(t.Context(), "k", lim); !errors.Is(err, floodgate.ErrStore) || !d.Allowed {
		t.Errorf("a call whose deadline ends before the store opens: %+v %v, want fail_open's answer with ErrStore", d, err)
	}

	// A deadline long enough for the try: Redis decides.
	l, err := floodgate.New(p, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		d   floodgate.Decision
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			d, err := l.Allow(t.Context(), "k", lim)
			answers <- answer{d, err}
		}()
	}
	select {
	case a := <-answers:
		t.Fatalf("a call answered before the store opened: %+v %v", a.d, a.err)
	default:
	}
	tick.c <- time.Now()
	allowed := 0
	for range 2 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("a call that waited for the open: %v, want Redis's decision", a.err)
		}
		if a.d.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Errorf("%d of 2 calls admitted against a limit of 1, want Redis's exact answer", allowed)
	}
}
