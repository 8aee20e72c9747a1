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

// pipelined is a store that counts its calls and answers several requests
// in one ApplyPipelined, failing the keys in fail.
type pipelined struct {
	floodgate.Store
	fail              map[string]bool
	applies, pipeline atomic.Int64
}

func (p *pipelined) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	p.applies.Add(1)
	if p.fail[r.Key] {
		return floodgate.Decision{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
	}
	return p.Store.Apply(ctx, r)
}

func (p *pipelined) ApplyPipelined(ctx context.Context, rs []floodgate.Request) ([]floodgate.Decision, []error) {
	p.pipeline.Add(1)
	ds, errs := make([]floodgate.Decision, len(rs)), make([]error, len(rs))
	for i, r := range rs {
		if p.fail[r.Key] {
			errs[i] = fmt.Errorf("%w: connection refused", floodgate.ErrStore)
			continue
		}
		ds[i], errs[i] = p.Store.Apply(ctx, r)
	}
	return ds, errs
}

// TestDecide: the items of one call go to the store in one round trip, and
// each failure is answered by the item's own policy: fail_open allows,
// fail_closed denies, local decides in the local store with this
// instance's share, an empty policy is the Limiter's, and local without a
// local store is fail_closed. The Observer sees every item.
func TestDecide(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	shared := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer shared.Close()
	local := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer local.Close()
	store := &pipelined{Store: shared, fail: map[string]bool{"open": true, "closed": true, "local": true, "default": true}}
	rec := &events{}
	l, err := floodgate.New(store, &floodgate.Options{Clock: clock, FailurePolicy: floodgate.FailOpen, Local: local, Instances: 4, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 10, Period: time.Minute}
	outs, err := l.Decide(t.Context(), []floodgate.Item{
		{Key: "ok", Limit: lim, Cost: 3},
		{Key: "open", Limit: lim, Cost: 1, Policy: floodgate.FailOpen},
		{Key: "closed", Limit: lim, Cost: 1, Policy: floodgate.FailClosed},
		{Key: "local", Limit: lim, Cost: 1, Policy: floodgate.FailLocal},
		{Key: "default", Limit: lim, Cost: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := store.pipeline.Load(); got != 1 || store.applies.Load() != 0 {
		t.Errorf("%d pipelined calls and %d single calls, want one pipelined call", got, store.applies.Load())
	}
	share := floodgate.Share(lim, 4)
	for i, want := range []struct {
		allowed   bool
		remaining int64
		policy    floodgate.FailurePolicy
		err       bool
		limit     floodgate.Limit
		fallback  bool
	}{
		{true, 7, "", false, lim, false},
		{true, 0, floodgate.FailOpen, true, lim, false},
		{false, 0, floodgate.FailClosed, true, lim, false},
		{true, 1, floodgate.FailLocal, true, share, true},
		{true, 0, floodgate.FailOpen, true, lim, false},
	} {
		o := outs[i]
		if o.Decision.Allowed != want.allowed || o.Decision.Remaining != want.remaining || o.Policy != want.policy ||
			(o.Err != nil) != want.err || o.Limit != want.limit || o.Decision.Fallback != want.fallback {
			t.Errorf("item %d: %+v, want allowed %v, remaining %d, policy %q, error %v, limit %v, fallback %v",
				i, o, want.allowed, want.remaining, want.policy, want.err, want.limit, want.fallback)
		}
	}
	if ev := rec.take(); len(ev) != 5 || ev[3].Outcome != outs[3] || ev[3].Request.Key != "local" {
		t.Errorf("observed %d events (%+v), want one per item", len(ev), ev)
	}

	// The breaker is open now: local items are decided locally at once,
	// without asking the store; the others still go to it.
	store.pipeline.Store(0)
	outs, err = l.Decide(t.Context(), []floodgate.Item{
		{Key: "local", Limit: lim, Cost: 1, Policy: floodgate.FailLocal},
		{Key: "ok", Limit: lim, Cost: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := outs[0]; !o.Decision.Fallback || o.Err != nil || o.Decision.Remaining != 0 {
		t.Errorf("local item with the breaker open: %+v, want a local decision without asking the store", o)
	}
	if o := outs[1]; o.Err != nil || o.Decision.Remaining != 6 || store.applies.Load() != 1 {
		t.Errorf("other item with the breaker open: %+v after %d single calls, want the store's decision", o, store.applies.Load())
	}

	// Without a local store, local is fail_closed.
	plain, err := floodgate.New(store, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	outs, err = plain.Decide(t.Context(), []floodgate.Item{{Key: "local", Limit: lim, Cost: 1, Policy: floodgate.FailLocal}})
	if err != nil {
		t.Fatal(err)
	}
	if o := outs[0]; o.Decision.Allowed || o.Policy != floodgate.FailClosed || o.Err == nil {
		t.Errorf("local without a local store: %+v, want fail_closed", o)
	}
}

// TestDecideInvalid: an invalid item fails the whole call with its index
// and field, and no item reaches the store.
func TestDecideInvalid(t *testing.T) {
	shared := memstore.New(&memstore.Options{SweepInterval: -1})
	defer shared.Close()
	store := &pipelined{Store: shared}
	l, err := floodgate.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 10, Period: time.Minute}
	for _, tc := range []struct {
		name  string
		items []floodgate.Item
		index int
		field string
	}{
		{"cost", []floodgate.Item{{Key: "a", Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: -1}}, 1, "cost"},
		{"key", []floodgate.Item{{Limit: lim, Cost: 1}, {Key: "b", Limit: lim, Cost: 1}}, 0, "key"},
		{"limit", []floodgate.Item{{Key: "a", Limit: lim}, {Key: "b", Limit: lim}, {Key: "c", Limit: floodgate.Limit{Limit: 1}}}, 2, "period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outs, err := l.Decide(t.Context(), tc.items)
			ie, ok := errors.AsType[*floodgate.ItemError](err)
			fe, isField := errors.AsType[*floodgate.FieldError](err)
			if !ok || ie.Index != tc.index || !isField || fe.Field != tc.field || outs != nil {
				t.Errorf("Decide = %v, %v; want item %d's error naming %q", outs, err, tc.index, tc.field)
			}
			if n := store.applies.Load() + store.pipeline.Load(); n != 0 {
				t.Errorf("the store was called %d times", n)
			}
		})
	}
}

// TestDecideAll: the descriptors of one request, all or nothing: after a
// user's limit of 1 per minute denied three requests, the tenant's limit
// of 5 per minute still admits four other users (the service check of the
// reservations issue, on the library).
func TestDecideAll(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer store.Close()
	l, err := floodgate.New(store, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	tenant := floodgate.Limit{Limit: 5, Period: time.Minute}
	user := floodgate.Limit{Limit: 1, Period: time.Minute}
	request := func(u string) []floodgate.Outcome {
		t.Helper()
		outs, err := l.DecideAll(t.Context(), []floodgate.Item{{Key: "tenant:1", Limit: tenant, Cost: 1}, {Key: "user:" + u, Limit: user, Cost: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	admitted := 0
	for range 4 {
		if outs := request("a"); outs[0].Decision.Allowed && outs[1].Decision.Allowed {
			admitted++
		} else if outs[0].Decision.Allowed || outs[1].Decision.Allowed {
			t.Fatalf("half admitted: %+v", outs)
		}
	}
	for _, u := range []string{"b", "c", "d", "e", "f"} {
		if outs := request(u); outs[0].Decision.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("%d requests admitted, want 5: user a once, and 4 of the 5 other users", admitted)
	}
}
