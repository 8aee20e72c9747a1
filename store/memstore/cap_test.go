package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestFullRefuses: a Limiter denies what a full store refuses, whatever
// its failure policy (finding 2 of issue 25: under fail_open, 250 of 250
// were admitted where the limits allowed 50): ErrFull is not a store
// failure, so neither FailOpen nor FailLocal answers it.
func TestFullRefuses(t *testing.T) {
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailClosed, floodgate.FailOpen, floodgate.FailLocal} {
		t.Run(string(policy), func(t *testing.T) {
			s := memstore.New(&memstore.Options{Shards: 1, MaxKeys: 1, SweepInterval: -1})
			defer s.Close()
			o := &floodgate.Options{FailurePolicy: policy}
			if policy == floodgate.FailLocal {
				local := memstore.New(nil)
				defer local.Close()
				o.Local, o.Instances = local, 1
			}
			l, err := floodgate.New(s, o)
			if err != nil {
				t.Fatal(err)
			}
			lim := floodgate.Limit{Limit: 5, Period: time.Hour}
			if d, err := l.Allow(t.Context(), "a", lim); err != nil || !d.Allowed {
				t.Fatalf("first key: %+v %v", d, err)
			}
			for range 3 {
				if d, err := l.Allow(t.Context(), "b", lim); !errors.Is(err, memstore.ErrFull) || d.Allowed {
					t.Errorf("a second key: %+v %v, want denied with ErrFull", d, err)
				}
			}
			out, err := l.Decide(t.Context(), []floodgate.Item{{Key: "c", Limit: lim, Cost: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if o := out[0]; o.Decision.Allowed || !errors.Is(o.Err, memstore.ErrFull) || o.Policy != floodgate.FailClosed || o.Decision.Fallback {
				t.Errorf("Decide on a full store: %+v, want a denial with ErrFull, Policy fail_closed", o)
			}
			if got := s.Refused(); got != 4 {
				t.Errorf("Refused() = %d, want 4", got)
			}
		})
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

// TestMaxBytes: the store bounds the bytes it holds, by its accounted
// estimate (finding 1 of issue 25: 1,500 keys of 1 MB took 2.41 GB): long
// keys fill it sooner than MaxKeys, a log's growth and reservations count,
// a request past the bound is refused with ErrFull and changes nothing,
// and once everything expires the accounted size is back to zero.
func TestMaxBytes(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const maxBytes = 10_000
	s := memstore.New(&memstore.Options{Clock: clock, Shards: 1, MaxBytes: maxBytes, SweepInterval: -1})
	defer s.Close()
	lim := floodgate.Limit{Limit: 5, Period: time.Minute}
	long := func(i int) string { return fmt.Sprintf("%04d%s", i, strings.Repeat("k", 996)) }
	n := 0
	for ; n < 100; n++ {
		_, err := s.Apply(t.Context(), floodgate.Request{Key: long(n), Limit: lim, Cost: 1})
		if errors.Is(err, memstore.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Each 1,000-byte key is accounted 1,128 bytes: eight fit in 10,000.
	if n != 8 {
		t.Errorf("%d keys of 1,000 bytes held under MaxBytes %d, want 8", n, maxBytes)
	}
	if b := s.Bytes(); b > maxBytes {
		t.Errorf("Bytes() = %d, above MaxBytes %d", b, maxBytes)
	}
	if d, err := s.Apply(t.Context(), floodgate.Request{Key: long(0), Limit: lim, Cost: 1}); err != nil || !d.Allowed {
		t.Errorf("a held key at the bound: %+v %v", d, err)
	}
	// A log that would grow past the bound is refused; its state is kept.
	clock.Advance(2 * time.Minute)
	s.Sweep()
	logLim := floodgate.Limit{Limit: 5000, Period: time.Minute, Algorithm: floodgate.SlidingWindowLog}
	if _, err := s.Apply(t.Context(), floodgate.Request{Key: "log", Limit: logLim, Cost: 100}); err != nil {
		t.Fatal(err)
	}
	var refused bool
	for range 100 {
		_, err := s.Apply(t.Context(), floodgate.Request{Key: "log", Limit: logLim, Cost: 100})
		if errors.Is(err, memstore.ErrFull) {
			refused = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !refused {
		t.Errorf("a log grown to %d bytes was never refused under MaxBytes %d", s.Bytes(), maxBytes)
	}
	if b := s.Bytes(); b > maxBytes+8*200 {
		t.Errorf("Bytes() = %d after the log's refusal, above MaxBytes %d and one request's growth", b, maxBytes)
	}
	// Reservations count: a flood of holds on one key is refused at the
	// bound, however few keys there are.
	clock.Advance(2 * time.Minute)
	s.Sweep()
	holds := 0
	for ; holds < 1000; holds++ {
		_, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{{Key: "k", Limit: floodgate.Limit{Limit: 1 << 40, Period: time.Minute}, Cost: 1}},
			ID: fmt.Sprintf("r%d", holds), TTL: time.Second})
		if errors.Is(err, memstore.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if holds == 1000 || holds == 0 {
		t.Errorf("%d reservations held on one key under MaxBytes %d, want a refusal before 1,000", holds, maxBytes)
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d, want the one key", s.Len())
	}
	// Everything expired and forgotten: nothing is accounted any more.
	clock.Advance(2*time.Minute + floodgate.DefaultHoldRetention)
	s.Sweep()
	if b := s.Bytes(); b != 0 {
		t.Errorf("Bytes() = %d once everything expired, want 0", b)
	}
}

// TestMaxHoldsPerKey: one key and period keeps at most MaxHoldsPerKey
// reservations (finding 1 of issue 25: 400k holds on one key took 265 MB
// while the key count read 1); other keys are not affected, and a
// retried reservation is answered from the one it holds.
func TestMaxHoldsPerKey(t *testing.T) {
	s := memstore.New(&memstore.Options{Shards: 1, MaxHoldsPerKey: 3, SweepInterval: -1})
	defer s.Close()
	lim := floodgate.Limit{Limit: 100, Period: time.Hour}
	reserve := func(key, id string) error {
		_, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{{Key: key, Limit: lim, Cost: 1}}, ID: id, TTL: time.Minute})
		return err
	}
	for i := range 3 {
		if err := reserve("a", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := reserve("a", "3"); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("a fourth reservation on one key: %v, want ErrFull", err)
	}
	if err := reserve("a", "0"); err != nil {
		t.Errorf("a retried reservation at the bound: %v", err)
	}
	if err := reserve("b", "0"); err != nil {
		t.Errorf("another key's reservation: %v", err)
	}
	// The refused reservation took nothing: 3 of 100 taken.
	if d, err := s.Apply(t.Context(), floodgate.Request{Key: "a", Limit: lim}); err != nil || d.Remaining != 97 {
		t.Errorf("a after the refusal: %+v %v, want 97 remaining", d, err)
	}
}
