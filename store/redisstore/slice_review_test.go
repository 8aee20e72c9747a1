package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/grant"
)

// hookHome is a grant.Home that runs a hook, once, in the middle of the
// first grant call that match selects, before the call reaches home: the
// call is in flight (sent, not yet run) while the hook moves the clock
// and makes other decisions, as a slow round trip or a paused sender
// would.
type hookHome struct {
	grant.Home
	mu    sync.Mutex
	match func(grant.Request) bool
	hook  func()
}

func (h *hookHome) Grant(ctx context.Context, r grant.Request) (grant.Grant, error) {
	h.mu.Lock()
	var hook func()
	if h.hook != nil && h.match(r) {
		hook, h.hook = h.hook, nil
	}
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return h.Home.Grant(ctx, r)
}

// sliceRecorder applies requests at the fake clock's time and keeps what
// was admitted, for checkArrivalCurve.
type sliceRecorder struct {
	t     *testing.T
	clock *floodgatetest.FakeClock
	l     floodgate.Limit
	mu    sync.Mutex
	got   []admission
}

func (sr *sliceRecorder) at(d time.Duration) { sr.clock.Set(t0.Add(d)) }

func (sr *sliceRecorder) apply(s *Store, key string, cost int64) floodgate.Decision {
	sr.t.Helper()
	d, err := s.Apply(context.Background(), floodgate.Request{Key: key, Limit: sr.l, Cost: cost})
	if err != nil {
		sr.t.Fatal(err)
	}
	if d.Allowed && cost > 0 {
		sr.mu.Lock()
		sr.got = append(sr.got, admission{d.Now, cost})
		sr.mu.Unlock()
	}
	return d
}

// TestSliceStaleRenewalOverrun: a renewal sent while the slice is live
// but run at home only after the grant's end plus SliceGrace comes back
// (before its own end, which home counts from the time it was sent) to a
// bucket that went on earning at the old share after the grant ended,
// while home had already given that share to another instance; install
// keeps those tokens (at most the new burst). Here k holds the whole rate
// (100/s, burst 100), spends its burst just before its grant ends at
// 1.5 s, its renewal sent at 1.4 s runs at 2.05 s; b was granted 45 of the
// rate at 1.52 s (k's grant purged), k gets the 55 left and keeps the 55
// tokens its old share of 100 earned from 1.5 s to 2.05 s. In [1.499 s,
// 2.05 s] k and b admit 100 + 55 + 23 = 178 units; the arrival curve
// allows 100 + 100 × 0.551 = 155.
func TestSliceStaleRenewalOverrun(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	stores := newInstances(t, addr, 2, Options{Prefix: testPrefix(t), Clock: clock,
		SliceRenew: 250 * time.Millisecond, SliceTerm: time.Second, SliceGrace: 20 * time.Millisecond})
	k, b := stores[0], stores[1]
	kh := &hookHome{Home: k.slices.home}
	k.slices.home = kh
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 100, Period: time.Second, Burst: 100, LocalBudget: 100}
	sr := &sliceRecorder{t: t, clock: clock, l: l}
	share := func(s *Store) int64 {
		sh := s.slices.shards.of(s.Key("k", l))
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if e := sh.m[s.Key("k", l)]; e != nil {
			return e.share
		}
		return 0
	}

	// k is granted the whole rate and starts full; a request above the burst
	// (denied) gives it demand, so that it keeps asking for all of it.
	sr.at(0)
	sr.apply(k, "k", 150)
	sr.at(250 * time.Millisecond)
	sr.apply(k, "k", 0) // renewal: granted to 1.25 s
	// b is granted nothing (k holds all) and learns k's demand; it asks for
	// 600 units (denied), so that it will ask for a part of the rate.
	sr.at(300 * time.Millisecond)
	for range 6 {
		sr.apply(b, "k", 100)
	}
	sr.at(500 * time.Millisecond)
	sr.apply(k, "k", 0) // renewal: granted to 1.5 s
	if got := share(k); got != 100 {
		t.Fatalf("k holds %d, want 100", got)
	}
	// k's next renewal is sent at 1.4 s and runs at home at 2.05 s.
	kh.match = func(r grant.Request) bool { return r.Holder == k.slices.holder && !r.Release }
	kh.hook = func() {
		sr.at(1499 * time.Millisecond)
		if d := sr.apply(k, "k", 100); !d.Allowed { // k spends its burst before its grant ends
			t.Errorf("k's burst at 1.499 s: %+v", d)
		}
		sr.at(1520 * time.Millisecond) // k's grant ended at 1.5 s; home frees it at 1.52 s
		sr.apply(b, "k", 0)
		if got := share(b); got <= 0 || got >= 100 {
			t.Fatalf("b holds %d, want a part of the rate", got)
		}
		sr.at(2050 * time.Millisecond)
	}
	sr.at(1400 * time.Millisecond)
	sr.apply(k, "k", 0)
	t.Logf("at 2.05 s: k holds %d, b holds %d", share(k), share(b))
	// Each spends what its bucket holds.
	for _, s := range []*Store{k, b} {
		for cost := int64(100); cost > 0; cost-- {
			if d := sr.apply(s, "k", cost); d.Allowed {
				break
			}
		}
	}
	checkArrivalCurve(t, l, sr.got)
}

// TestSliceBatchGiveBackOverrun: a batch's slice takes its cost, the rest
// of the batch takes time (here the grant call of its second key), the
// slice's bucket refills meanwhile, which would have capped the tokens
// had they not been taken, and the instance spends the refilled bucket;
// the batch is then denied and giveBack returns the cost to the bucket on
// top. At 0.5 s the instance admits 100 + 50 = 150 units, above the
// burst of 100 (TokenBucket.Refund gives back what is missing now, not
// what the take still owes after the refill was capped).
func TestSliceBatchGiveBackOverrun(t *testing.T) {
	addr := standaloneAddr(t)
	clock := floodgatetest.NewFakeClock(t0)
	s := newInstances(t, addr, 1, Options{Prefix: testPrefix(t), Clock: clock, SliceTerm: time.Hour})[0]
	h := &hookHome{Home: s.slices.home}
	s.slices.home = h
	l := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 100, Period: time.Second, Burst: 100, LocalBudget: 100}
	sr := &sliceRecorder{t: t, clock: clock, l: l}
	sr.at(0)
	sr.apply(s, "a", 0) // a's slice: the whole rate, full
	h.match = func(r grant.Request) bool { return r.Key == s.Key("b", l) }
	h.hook = func() {
		// While the batch waits, a's bucket (50 after the take) refills
		// to its burst and is spent.
		sr.at(500 * time.Millisecond)
		if d := sr.apply(s, "a", 100); !d.Allowed {
			t.Errorf("a's refilled bucket at 0.5 s: %+v", d)
		}
	}
	ds, err := s.ApplyBatch(context.Background(), []floodgate.Request{
		{Key: "a", Limit: l, Cost: 50},
		{Key: "b", Limit: l, Cost: 1000}, // above b's burst: the batch is denied
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("batch: %+v, want denied", ds)
	}
	sr.apply(s, "a", 50)
	checkArrivalCurve(t, l, sr.got)
}
