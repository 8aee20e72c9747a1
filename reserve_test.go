package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// downReserver is a Reserver whose every call fails.
type downReserver struct{ failingStore }

func (downReserver) Reserve(context.Context, floodgate.HoldRequest) (floodgate.HoldResult, error) {
	return floodgate.HoldResult{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
}

func (downReserver) Settle(context.Context, floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return nil, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
}

// TestReserve goes through the Limiter: reserve the bound, commit the
// actual cost, a retry of the commit replayed, Settle by ID alone, and
// all or nothing across keys.
func TestReserve(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer store.Close()
	l, err := floodgate.New(store, &floodgate.Options{Clock: clock, KeyPrefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	tokens := floodgate.Limit{Limit: 1000, Period: time.Minute}
	res, d, err := l.Reserve(t.Context(), "tenant:7", tokens, 800, nil)
	if err != nil || !d.Allowed || !res.Held || d.Remaining != 200 || len(res.ID) != 32 {
		t.Fatalf("Reserve 800: %+v %+v %v", res, d, err)
	}
	st, err := res.Commit(t.Context(), 350)
	if err != nil || st[0].Refunded != 450 || st[0].Decision.Remaining != 650 {
		t.Fatalf("Commit 350: %+v %v", st, err)
	}
	st, err = l.Reservation(res.ID, res.Items, false).Commit(t.Context(), 350)
	if err != nil || !st[0].Replayed || st[0].Refunded != 450 {
		t.Errorf("Commit by ID, again: %+v %v; want the first answer, replayed", st, err)
	}
	if _, err := res.Cancel(t.Context()); !errors.Is(err, floodgate.ErrConflict) {
		t.Errorf("Cancel after Commit: %v, want ErrConflict", err)
	}

	// All or nothing: the user's limit denies, so the tenant's budget is
	// untouched.
	user := floodgate.Limit{Limit: 100, Period: time.Minute}
	res, d, ds, err := l.ReserveEach(t.Context(), []floodgate.Item{
		{Key: "tenant:7", Limit: tokens, Cost: 300},
		{Key: "user:1", Limit: user, Cost: 300},
	}, &floodgate.ReserveOptions{ID: "req-1"})
	if err != nil || d.Allowed || res.Held || ds[0].Decision.Allowed || ds[0].Decision.Remaining != 650 || ds[1].Decision.RetryAfter != floodgate.Never {
		t.Errorf("ReserveEach over the user's limit: %+v %+v %+v %v", res, d, ds, err)
	}
	if st, err := res.Commit(t.Context(), 1); err != nil || st[0] != (floodgate.Settlement{}) {
		t.Errorf("Commit of a denied reservation: %+v %v, want nothing", st, err)
	}

	if _, _, err := l.Reserve(t.Context(), "c", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 1, Period: time.Second}, 1, nil); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("Reserve on a concurrency limit: %v, want ErrInvalidLimit", err)
	}
	if _, _, err := l.Reserve(t.Context(), "k", tokens, 1, &floodgate.ReserveOptions{ID: "not an id"}); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("Reserve with a bad ID: %v, want ErrInvalidRequest", err)
	}
	plain, _ := floodgate.New(failingStore{}, nil)
	if _, _, err := plain.Reserve(t.Context(), "k", tokens, 1, nil); !errors.Is(err, floodgate.ErrNotSupported) {
		t.Errorf("Reserve on a store without reservations: %v, want ErrNotSupported", err)
	}
}

// TestReserveFailurePolicy: a store failure on Reserve is answered by the
// Limiter's policy: fail_closed denies, fail_open allows a reservation
// that holds nothing, local holds the units in the local store, where
// Commit settles them.
func TestReserveFailurePolicy(t *testing.T) {
	lim := floodgate.Limit{Limit: 9, Period: time.Minute}
	for _, tc := range []struct {
		policy            floodgate.FailurePolicy
		allowed, held, lo bool
	}{
		{floodgate.FailClosed, false, false, false},
		{floodgate.FailOpen, true, false, false},
		{floodgate.FailLocal, true, true, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			o := &floodgate.Options{FailurePolicy: tc.policy}
			if tc.policy == floodgate.FailLocal {
				local := memstore.New(nil)
				defer local.Close()
				o.Local, o.Instances = local, 3
			}
			l, err := floodgate.New(downReserver{}, o)
			if err != nil {
				t.Fatal(err)
			}
			res, d, err := l.Reserve(t.Context(), "k", lim, 2, nil)
			if d.Allowed != tc.allowed || res == nil || res.Held != tc.held || res.Local != tc.lo {
				t.Fatalf("Reserve: %+v %+v %v", res, d, err)
			}
			if tc.policy != floodgate.FailLocal {
				if err == nil {
					t.Errorf("Reserve under %s: no error", tc.policy)
				}
				if st, cerr := res.Commit(t.Context(), 1); cerr != nil || st[0] != (floodgate.Settlement{}) {
					t.Errorf("Commit of a reservation that holds nothing: %+v %v", st, cerr)
				}
				return
			}
			if err != nil || !res.Held || !res.Local || d.Limit != 3 || d.Remaining != 1 {
				t.Fatalf("Reserve under local: %+v %+v %v; want a local hold of the share 3", res, d, err)
			}
			st, err := res.Commit(t.Context(), 1)
			if err != nil || st[0].Refunded != 1 || st[0].Decision.Remaining != 2 {
				t.Errorf("Commit of a local reservation: %+v %v", st, err)
			}
		})
	}
}

// TestReserveOneStateOnce: a reservation or a settle that names one state
// twice is refused, on every store (a settle of the same key twice would
// give its units back twice).
func TestReserveOneStateOnce(t *testing.T) {
	store := memstore.New(&memstore.Options{SweepInterval: -1})
	defer store.Close()
	l, err := floodgate.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	it := floodgate.Item{Key: "k", Limit: floodgate.Limit{Limit: 100, Period: time.Minute}, Cost: 30}
	if _, _, _, err := l.ReserveEach(t.Context(), []floodgate.Item{it, it}, nil); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("reserve of one state twice: %v, want ErrInvalidRequest", err)
	}
	res, _, err := l.Reserve(t.Context(), "k", it.Limit, 40, nil)
	if err != nil {
		t.Fatal(err)
	}
	twice := l.Reservation(res.ID, []floodgate.Item{res.Items[0], res.Items[0], res.Items[0]}, false)
	if _, err := twice.Commit(t.Context(), 0); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("commit naming one state three times: %v, want ErrInvalidRequest", err)
	}
	if d, _ := l.Peek(t.Context(), "k", it.Limit); d.Remaining != 60 {
		t.Errorf("after the refused commit: %d remaining, want 60", d.Remaining)
	}
}

// switchedReserver is a memstore whose reservations fail while down is set.
type switchedReserver struct {
	*memstore.Store
	down atomic.Bool
}

func (s *switchedReserver) Reserve(ctx context.Context, h floodgate.HoldRequest) (floodgate.HoldResult, error) {
	if s.down.Load() {
		return floodgate.HoldResult{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
	}
	return s.Store.Reserve(ctx, h)
}

// TestReserveSplit: a reservation whose items the open breaker splits
// between the local store (a FailLocal rule) and the shared one (the rest,
// which the store holds) is held nowhere: both halves are cancelled, every
// item is answered as FailClosed, and the error says why.
func TestReserveSplit(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	shared := &switchedReserver{Store: memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})}
	defer shared.Close()
	local := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer local.Close()
	l, err := floodgate.New(shared, &floodgate.Options{Clock: clock, Local: local, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 10, Period: time.Minute}
	a := floodgate.Item{Key: "a", Limit: lim, Cost: 5, Policy: floodgate.FailLocal} // the whole local share
	b := floodgate.Item{Key: "b", Limit: lim, Cost: 10}                             // the whole limit

	// The store fails: a's reservation is held locally and the breaker opens.
	shared.down.Store(true)
	res, _, _, err := l.ReserveEach(t.Context(), []floodgate.Item{a}, nil)
	if err != nil || !res.Held || !res.Local {
		t.Fatalf("ReserveEach with the store down: %+v %v, want a local hold", res, err)
	}
	if _, err := res.Cancel(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The store is back, the breaker still open: a is decided locally, b
	// in the store, and both hold their units until the split is undone.
	shared.down.Store(false)
	res, d, outs, err := l.ReserveEach(t.Context(), []floodgate.Item{a, b}, nil)
	if !errors.Is(err, floodgate.ErrSplitReservation) || d.Allowed || res == nil || res.Held {
		t.Fatalf("split ReserveEach: %+v %+v %v, want ErrSplitReservation, denied, held nowhere", res, d, err)
	}
	for i, o := range outs {
		if o.Policy != floodgate.FailClosed || o.Decision.Allowed || !errors.Is(o.Err, floodgate.ErrSplitReservation) {
			t.Errorf("outcome %d: %+v, want FailClosed with ErrSplitReservation", i, o)
		}
	}
	// Both halves were given back: each full cost is held again.
	for _, it := range []floodgate.Item{a, b} {
		res, d, _, err := l.ReserveEach(t.Context(), []floodgate.Item{it}, nil)
		if err != nil || !d.Allowed || !res.Held {
			t.Errorf("reserve of %s after the split: %+v %+v %v, want its units back", it.Key, res, d, err)
		}
	}
}
