package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestMaxKeys: at MaxKeys a request that would add a key fails with
// ErrFull (a batch or a reservation as a whole, changing nothing), keys
// already held are decided as ever, and expired keys make room.
func TestMaxKeys(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(&memstore.Options{Clock: clock, Shards: 1, MaxKeys: 3, SweepInterval: -1})
	defer s.Close()
	lim := floodgate.Limit{Limit: 5, Period: time.Minute}
	req := func(key string) floodgate.Request { return floodgate.Request{Key: key, Limit: lim, Cost: 1} }
	for _, k := range []string{"a", "b", "c"} {
		if d, err := s.Apply(t.Context(), req(k)); err != nil || !d.Allowed {
			t.Fatalf("key %s below the cap: %+v %v", k, d, err)
		}
	}
	if _, err := s.Apply(t.Context(), req("d")); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a fourth key: %v, want ErrFull", err)
	}
	if d, err := s.Apply(t.Context(), req("a")); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Errorf("a held key at the cap: %+v %v, want its second unit", d, err)
	}
	// Another period of a held key is another state, so another key.
	if _, err := s.Apply(t.Context(), floodgate.Request{Key: "a", Limit: floodgate.Limit{Limit: 5, Period: time.Hour}, Cost: 1}); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a held key under another period: %v, want ErrFull", err)
	}
	if _, err := s.ApplyBatch(t.Context(), []floodgate.Request{req("b"), req("e")}); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a batch with a new key: %v, want ErrFull", err)
	}
	if _, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{req("f")}, ID: "r1", TTL: time.Minute}); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a reservation of a new key: %v, want ErrFull", err)
	}
	// The refused batch took nothing from b.
	if d, err := s.Apply(t.Context(), floodgate.Request{Key: "b", Limit: lim}); err != nil || d.Remaining != 4 {
		t.Errorf("b after the refused batch: %+v %v, want 4 remaining", d, err)
	}
	if got := s.Refused(); got != 4 {
		t.Errorf("Refused() = %d, want 4", got)
	}
	// Once the windows end, the expired keys make room for new ones.
	clock.Advance(2 * time.Minute)
	if d, err := s.Apply(t.Context(), req("d")); err != nil || !d.Allowed {
		t.Errorf("a new key once the others expired: %+v %v", d, err)
	}
	if n := s.Len(); n > 3 {
		t.Errorf("Len() = %d, want at most 3", n)
	}
}

// TestMaxKeysFailurePolicy: a Limiter answers ErrFull by its failure
// policy, as any store failure.
func TestMaxKeysFailurePolicy(t *testing.T) {
	s := memstore.New(&memstore.Options{Shards: 1, MaxKeys: 1, SweepInterval: -1})
	defer s.Close()
	l, err := floodgate.New(s, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 5, Period: time.Minute}
	if d, err := l.Allow(t.Context(), "a", lim); err != nil || !d.Allowed {
		t.Fatalf("first key: %+v %v", d, err)
	}
	if d, err := l.Allow(t.Context(), "b", lim); !errors.Is(err, memstore.ErrFull) || d.Allowed {
		t.Errorf("a second key under fail_closed: %+v %v, want denied with ErrFull", d, err)
	}
}

// TestNoLimiterDeadline: a Limiter's Timeout puts no deadline on the
// memory store's calls (finding 3 of issue 25): with a deadline shorter
// than any call, a saturated host in the small, FailOpen still admits
// exactly the limit, with no error.
func TestNoLimiterDeadline(t *testing.T) {
	s := memstore.New(&memstore.Options{SweepInterval: -1})
	defer s.Close()
	l, err := floodgate.New(s, &floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 5, Period: time.Hour}
	admitted := 0
	for range 20 {
		d, err := l.Allow(t.Context(), "k", lim)
		if err != nil {
			t.Fatalf("Allow under a 1 ns Timeout: %v, want the store's decision", err)
		}
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 5 {
		t.Errorf("admitted %d of 20 against a limit of 5", admitted)
	}
	// The caller's own context still counts.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Apply(ctx, floodgate.Request{Key: "k", Limit: lim, Cost: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context: %v, want context.Canceled", err)
	}
}
