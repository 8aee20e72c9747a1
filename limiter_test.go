package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

var perSecond = floodgate.Limit{Limit: 2, Period: time.Second}

// failingStore fails every call with err, after waiting for ctx if block is
// set (a store that hangs until the deadline).
type failingStore struct {
	err   error
	block bool
}

func (s failingStore) Apply(ctx context.Context, _ floodgate.Request) (floodgate.Decision, error) {
	if s.block {
		<-ctx.Done()
		return floodgate.Decision{}, ctx.Err()
	}
	return floodgate.Decision{}, s.err
}

func TestFailurePolicy(t *testing.T) {
	down := fmt.Errorf("%w: connection refused", floodgate.ErrStore)
	for _, tc := range []struct {
		policy      floodgate.FailurePolicy
		wantAllowed bool
	}{
		{"", false},
		{floodgate.FailClosed, false},
		{floodgate.FailOpen, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			rec := &events{}
			l, err := floodgate.New(failingStore{err: down}, &floodgate.Options{FailurePolicy: tc.policy, Observer: rec})
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(t.Context(), "k", perSecond)
			if !errors.Is(err, down) {
				t.Errorf("err = %v, want %v", err, down)
			}
			if got, want := d.Allowed, tc.wantAllowed; got != want {
				t.Errorf("Allowed = %v, want %v", got, want)
			}
			ev := rec.take()
			if got, want := len(ev), 1; got != want {
				t.Fatalf("observed %d events, want %d", got, want)
			}
			if e := ev[0]; !errors.Is(e.Err, down) || e.Decision != d || e.Request.Key != "k" {
				t.Errorf("event = %+v", e)
			}
		})
	}
}

// TestFailurePolicyStoreFailuresOnly: a failure policy answers a store's
// own failure (an error wrapping ErrStore, ErrUnexpectedReply or ErrClosed,
// or a deadline) and a cancelled call; any other error is denied with the
// error, whatever the policy, on the direct path and through the pipeline
// alike, and only a store failure is decided in FailLocal's local store.
func TestFailurePolicyStoreFailuresOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		policy bool // the failure policy answers it
		local  bool // FailLocal decides it locally
	}{
		{"ErrStore", fmt.Errorf("redis: %w: i/o timeout", floodgate.ErrStore), true, true},
		{"ErrUnexpectedReply", fmt.Errorf("%w: 3 integers", floodgate.ErrUnexpectedReply), true, true},
		{"ErrClosed", floodgate.ErrClosed, true, true},
		{"deadline", context.DeadlineExceeded, true, true},
		{"cancelled", fmt.Errorf("%w: %w", floodgate.ErrStore, context.Canceled), true, false},
		{"unknown", errors.New("something else"), false, false},
		{"invalid", fmt.Errorf("store: %w", floodgate.ErrInvalidRequest), false, false},
		{"conflict", floodgate.ErrConflict, false, false},
		{"not supported", floodgate.ErrNotSupported, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, o := range []*floodgate.Options{{FailurePolicy: floodgate.FailOpen}, {FailurePolicy: floodgate.FailOpen, Timeout: time.Hour}} {
				l, err := floodgate.New(failingStore{err: tc.err}, o)
				if err != nil {
					t.Fatal(err)
				}
				d, err := l.Allow(t.Context(), "k", perSecond)
				if !errors.Is(err, tc.err) || d.Allowed != tc.policy {
					t.Errorf("fail_open, timeout %v: Allow = %+v, %v; want allowed %v with the error", o.Timeout, d, err, tc.policy)
				}
			}
			local := memstore.New(nil)
			defer local.Close()
			l, err := floodgate.New(failingStore{err: tc.err}, &floodgate.Options{FailurePolicy: floodgate.FailLocal, Local: local, Instances: 1})
			if err != nil {
				t.Fatal(err)
			}
			out, err := l.Decide(t.Context(), []floodgate.Item{{Key: "k", Limit: perSecond, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			want := floodgate.FailClosed
			if tc.local {
				want = floodgate.FailLocal
			}
			if o := out[0]; o.Policy != want || !errors.Is(o.Err, tc.err) || o.Decision.Allowed != tc.local {
				t.Errorf("local: %+v, want policy %q with the error", o, want)
			}
		})
	}
}

// failingAllowStore fails every call with err and a Decision that allows,
// which a Limiter must replace with its failure policy's.
type failingAllowStore struct{ err error }

func (s failingAllowStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{Allowed: true, Limit: 2, Remaining: 1}, s.err
}

// TestFailurePolicyDirect is TestFailurePolicy for a Limiter with no
// observer, fallback or timeout, whose Allow and AllowN call the store in
// their own frames, each with its own copy of that path: the store's
// Decision is dropped for the policy's.
func TestFailurePolicyDirect(t *testing.T) {
	down := fmt.Errorf("%w: connection refused", floodgate.ErrStore)
	for _, tc := range []struct {
		policy      floodgate.FailurePolicy
		wantAllowed bool
	}{
		{"", false},
		{floodgate.FailClosed, false},
		{floodgate.FailOpen, true},
	} {
		l, err := floodgate.New(failingAllowStore{err: down}, &floodgate.Options{FailurePolicy: tc.policy})
		if err != nil {
			t.Fatal(err)
		}
		for name, call := range map[string]func() (floodgate.Decision, error){
			"Allow":  func() (floodgate.Decision, error) { return l.Allow(t.Context(), "k", perSecond) },
			"AllowN": func() (floodgate.Decision, error) { return l.AllowN(t.Context(), "k", perSecond, 2) },
		} {
			t.Run(string(tc.policy)+"/"+name, func(t *testing.T) {
				d, err := call()
				if !errors.Is(err, down) {
					t.Errorf("err = %v, want %v", err, down)
				}
				if got, want := d, (floodgate.Decision{Allowed: tc.wantAllowed}); got != want {
					t.Errorf("Decision = %+v, want %+v", got, want)
				}
			})
		}
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := floodgate.New(nil, nil); err == nil {
		t.Error("New(nil store) succeeded")
	}
	if _, err := floodgate.New(memstore.New(nil), &floodgate.Options{FailurePolicy: "fail_sideways"}); err == nil {
		t.Error("New with unknown policy succeeded")
	}
	if _, err := floodgate.New(memstore.New(nil), &floodgate.Options{Timeout: -time.Second}); err == nil {
		t.Error("New with negative timeout succeeded")
	}
}

func TestTimeoutBoundsStoreCall(t *testing.T) {
	l, err := floodgate.New(failingStore{block: true}, &floodgate.Options{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := l.Allow(t.Context(), "k", perSecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
	if d.Allowed {
		t.Error("fail-closed limiter allowed on timeout")
	}
}

// deadlineStore records the deadline of the context each call gets.
type deadlineStore struct {
	got chan time.Time
}

func (s deadlineStore) Apply(ctx context.Context, _ floodgate.Request) (floodgate.Decision, error) {
	d, _ := ctx.Deadline()
	s.got <- d
	return floodgate.Decision{Allowed: true}, nil
}

// TestTimeoutKeepsEarlierDeadline: the store's call ends at the earlier of
// the caller's deadline and Options.Timeout.
func TestTimeoutKeepsEarlierDeadline(t *testing.T) {
	s := deadlineStore{got: make(chan time.Time, 1)}
	l, err := floodgate.New(s, &floodgate.Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	early, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	want, _ := early.Deadline()
	if _, err := l.Allow(early, "k", perSecond); err != nil {
		t.Fatal(err)
	}
	if got := <-s.got; !got.Equal(want) {
		t.Errorf("with the caller's deadline first, the store's is %v, want the caller's %v", got, want)
	}
	late, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	before := time.Now()
	if _, err := l.Allow(late, "k", perSecond); err != nil {
		t.Fatal(err)
	}
	if got := <-s.got; got.Before(before.Add(time.Minute)) || got.After(time.Now().Add(time.Minute)) {
		t.Errorf("with the timeout first, the store's deadline is %v, want a minute after the call (%v)", got, before)
	}
}

func TestInvalidInputIsAnErrorAndADenial(t *testing.T) {
	l, _ := floodgate.New(failingStore{}, &floodgate.Options{FailurePolicy: floodgate.FailOpen})
	for name, call := range map[string]func() (floodgate.Decision, error){
		"empty key":     func() (floodgate.Decision, error) { return l.Allow(t.Context(), "", perSecond) },
		"negative cost": func() (floodgate.Decision, error) { return l.AllowN(t.Context(), "k", perSecond, -1) },
		"bad limit":     func() (floodgate.Decision, error) { return l.Allow(t.Context(), "k", floodgate.Limit{Limit: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			d, err := call()
			if !errors.Is(err, floodgate.ErrInvalidRequest) && !errors.Is(err, floodgate.ErrInvalidLimit) {
				t.Errorf("err = %v, want an invalid request or limit", err)
			}
			if d.Allowed {
				t.Error("invalid input was allowed by the fail-open policy")
			}
		})
	}
}

func TestKeyPrefixSeparatesLimiters(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	clock := floodgatetest.NewFakeClock(time.Unix(1_800_000_000, 0))
	a, _ := floodgate.New(store, &floodgate.Options{KeyPrefix: "a:", Clock: clock})
	b, _ := floodgate.New(store, &floodgate.Options{KeyPrefix: "b:", Clock: clock})
	one := floodgate.Limit{Limit: 1, Period: time.Minute}
	if d, _ := a.Allow(t.Context(), "k", one); !d.Allowed {
		t.Fatal("first request denied")
	}
	if d, _ := b.Allow(t.Context(), "k", one); !d.Allowed {
		t.Error("limiter b shares limiter a's budget despite another prefix")
	}
	if d, _ := store.Apply(t.Context(), floodgate.Request{Key: "a:k", Limit: one, Now: clock.Now()}); d.Remaining != 0 {
		t.Errorf("store key a:k has remaining %d, want 0", d.Remaining)
	}
}

func TestResetNeedsResetter(t *testing.T) {
	l, _ := floodgate.New(failingStore{}, nil)
	if err := l.Reset(t.Context(), "k", perSecond); !errors.Is(err, floodgate.ErrNotSupported) {
		t.Errorf("Reset on a store without Resetter: err = %v, want ErrNotSupported", err)
	}
}

func TestAcquire(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Unix(1_800_000_000, 0))
	store := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { store.Close() })
	l, _ := floodgate.New(store, &floodgate.Options{Clock: clock})
	one := floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 1, Period: time.Minute}
	ctx := t.Context()

	if _, _, err := l.Acquire(ctx, "k", perSecond); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("Acquire with a fixed window: err = %v, want ErrInvalidLimit", err)
	}
	lease, d, err := l.Acquire(ctx, "k", one)
	if err != nil || lease == nil || !d.Allowed {
		t.Fatalf("Acquire = %v, %+v, %v", lease, d, err)
	}
	if other, d, _ := l.Acquire(ctx, "k", one); other != nil || d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("second Acquire = %v, %+v; want denied with RetryAfter 1m", other, d)
	}
	clock.Advance(50 * time.Second)
	if d, err := lease.Renew(ctx); err != nil || !d.Allowed || d.ResetAfter != time.Minute {
		t.Fatalf("Renew = %+v, %v", d, err)
	}
	clock.Advance(50 * time.Second) // the renewed lease is still held
	if other, _, _ := l.Acquire(ctx, "k", one); other != nil {
		t.Fatal("Acquire succeeded while a renewed lease was held")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	next, _, _ := l.Acquire(ctx, "k", one)
	if next == nil {
		t.Fatal("Acquire after Release denied")
	}
	clock.Advance(time.Minute) // the lease expires without Release
	if again, _, _ := l.Acquire(ctx, "k", one); again == nil {
		t.Fatal("Acquire after the lease expired denied")
	}
}

func TestAcquireFailOpenLeaseHoldsNothing(t *testing.T) {
	l, _ := floodgate.New(failingStore{err: fmt.Errorf("%w: down", floodgate.ErrStore)}, &floodgate.Options{FailurePolicy: floodgate.FailOpen})
	one := floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 1, Period: time.Minute}
	lease, d, err := l.Acquire(t.Context(), "k", one)
	if err == nil || !d.Allowed || lease == nil {
		t.Fatalf("Acquire = %v, %+v, %v; want a lease, allowed, and the error", lease, d, err)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Errorf("Release of a fail-open lease: %v", err)
	}
}

// sequentialStore has no Batcher, so AllowEach falls back to one Apply per
// limit.
type sequentialStore struct{ floodgate.Store }

func TestAllowEachWithoutBatcher(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	clock := floodgatetest.NewFakeClock(time.Unix(1_800_000_000, 0))
	l, _ := floodgate.New(sequentialStore{store}, &floodgate.Options{Clock: clock})
	d, each, err := l.AllowEach(t.Context(), "k", 1, perSecond, floodgate.Limit{Limit: 1, Period: time.Hour})
	if err != nil || !d.Allowed || len(each) != 2 {
		t.Fatalf("AllowEach = %+v, %v, %v", d, each, err)
	}
	d, _, _ = l.AllowEach(t.Context(), "k", 1, perSecond, floodgate.Limit{Limit: 1, Period: time.Hour})
	if d.Allowed {
		t.Error("second AllowEach allowed past the hourly limit of 1")
	}
}
