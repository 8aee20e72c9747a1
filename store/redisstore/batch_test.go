package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// slotConn is the Conn of a standalone server that reports itself a
// Cluster client, so that the store splits every all-or-nothing call by
// slot as on a Cluster, one script run per slot, while the test can read
// every key on one server. fail, if set, makes the scripts it names fail
// before they run, as a lost connection would.
type slotConn struct {
	Conn
	fail func(sc *script, keys []string) bool
}

func (slotConn) Cluster() bool { return true }

var errInjected = errors.New("injected failure")

func (c slotConn) failed(sha string, keys []string) bool {
	if c.fail == nil {
		return false
	}
	for _, sc := range []*script{scripts.batch, scripts.refund} {
		if sc.sha == sha && c.fail(sc, keys) {
			return true
		}
	}
	return false
}

func (c slotConn) EvalSHA(ctx context.Context, sha string, keys, args []string, w Wait) ([]int64, error) {
	if c.failed(sha, keys) {
		return nil, errInjected
	}
	return c.Conn.EvalSHA(ctx, sha, keys, args, w)
}

// slotStore returns a store over a slotConn of a fresh standalone server.
func slotStore(t *testing.T, fail func(sc *script, keys []string) bool) *Store {
	t.Helper()
	c := newRueidis(t, standaloneAddr(t))
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	s, err := NewWithConn(slotConn{Conn: rueidisConn{c}, fail: fail}, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// twoSlots returns two subjects whose keys are in different Cluster slots.
func twoSlots(t *testing.T, s *Store) (string, string) {
	t.Helper()
	l := limitOf(floodgate.FixedWindow, 1, time.Minute)
	a, b := "tenant", "user:1"
	if keySlot(s.Key(a, l)) == keySlot(s.Key(b, l)) {
		t.Fatalf("%q and %q share a slot", a, b)
	}
	return a, b
}

// peek is key's decision under l at now, cost 0.
func peek(t *testing.T, s *Store, key string, l floodgate.Limit, now time.Time) floodgate.Decision {
	t.Helper()
	d, err := s.Apply(t.Context(), floodgate.Request{Key: key, Limit: l, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestBatchKeys checks a batch of several subjects on one server: one
// script, all or nothing.
func TestBatchKeys(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	tenant := limitOf(floodgate.FixedWindow, 5, time.Minute)
	user := limitOf(floodgate.GCRA, 2, time.Minute)
	batch := func(u string) []floodgate.Decision {
		t.Helper()
		ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{request("acme", tenant, t0), request(u, user, t0)})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	for i := range 2 {
		if d := floodgate.Combine(batch("u1")); !d.Allowed {
			t.Fatalf("batch %d denied: %+v", i, d)
		}
	}
	ds := batch("u1")
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 3 || ds[1].Allowed || ds[1].RetryAfter <= 0 {
		t.Fatalf("third batch of u1: %+v, want denied by the user and the tenant's 3 untouched", ds)
	}
	before := commandCalls(t, c, "evalsha")
	if d := floodgate.Combine(batch("u2")); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("u2: %+v, want allowed with the user's 1 left", d)
	}
	if n := commandCalls(t, c, "evalsha") - before; n != 1 {
		t.Errorf("%d script runs for a batch of two subjects, want 1", n)
	}
	if d := peek(t, s, "acme", tenant, t0); d.Remaining != 2 {
		t.Errorf("tenant after three admitted batches: %d remaining, want 2", d.Remaining)
	}
	if st := s.CrossSlotStats(); st != (CrossSlotStats{}) {
		t.Errorf("CrossSlotStats on one server: %+v, want zero", st)
	}
}

// TestCrossSlotBatch checks the protocol of a batch over several slots
// (slotConn): every slot admits, or the slots that admitted give back
// what they took and report their state unchanged, for every algorithm
// and both clocks.
func TestCrossSlotBatch(t *testing.T) {
	s := slotStore(t, nil)
	tenantKey, userKey := twoSlots(t, s)
	user := limitOf(floodgate.FixedWindow, 1, time.Hour)
	for _, serverTime := range []bool{false, true} {
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingWindowLog, floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(fmt.Sprintf("%s/server_time=%v", alg, serverTime), func(t *testing.T) {
				at := t0.Add(30 * time.Second)
				if serverTime {
					at = time.Time{}
				}
				tenant := limitOf(alg, 10, time.Minute)
				tk, uk := tenantKey+"/"+t.Name(), userKey+"/"+t.Name()
				rs := []floodgate.Request{{Key: tk, Limit: tenant, Cost: 3, Now: at}, {Key: uk, Limit: user, Cost: 1, Now: at}}
				ds, err := s.ApplyBatch(t.Context(), rs)
				if err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[0].Remaining != 7 {
					t.Fatalf("first batch: %+v, %v; want both allowed, 7 of the tenant's left", ds, err)
				}
				before := peek(t, s, tk, tenant, at)
				st := s.CrossSlotStats()
				ds, err = s.ApplyBatch(t.Context(), rs)
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != before.Remaining || ds[1].Allowed || ds[1].RetryAfter <= 0 {
					t.Fatalf("second batch: %+v; want denied by the user, the tenant's state unchanged (%d remaining) with RetryAfter 0", ds, before.Remaining)
				}
				after := peek(t, s, tk, tenant, at)
				if after.Remaining != before.Remaining || (!serverTime && after.ResetAfter != before.ResetAfter) {
					t.Errorf("tenant after a compensated batch: %+v, before %+v", after, before)
				}
				got := s.CrossSlotStats()
				if want := (CrossSlotStats{Calls: st.Calls + 1, Compensated: st.Compensated + 1, Units: st.Units + 3, Refunded: st.Refunded + 3}); got != want {
					t.Errorf("CrossSlotStats %+v, want %+v", got, want)
				}
			})
		}
	}
}

// TestCrossSlotLeases: concurrency requests of a batch over several slots
// must be in one slot, decided last: a lease is taken only when every
// other slot admitted, and never compensated.
func TestCrossSlotLeases(t *testing.T) {
	s := slotStore(t, nil)
	a, b := twoSlots(t, s)
	conc := limitOf(floodgate.Concurrency, 1, time.Minute)
	fw := limitOf(floodgate.FixedWindow, 1, time.Minute)
	lease := func(key, id string) floodgate.Request {
		return floodgate.Request{Key: key, Limit: conc, Cost: 1, Lease: id, Now: t0}
	}
	if _, err := s.ApplyBatch(t.Context(), []floodgate.Request{lease(a, "x"), lease(b, "x")}); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("leases in two slots: %v, want ErrInvalidRequest", err)
	}
	// The other slot admits: the lease is taken.
	ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{lease(a, "x"), request(b, fw, t0)})
	if err != nil || !floodgate.Combine(ds).Allowed {
		t.Fatalf("lease and a free window: %+v, %v", ds, err)
	}
	// The other slot denies: the lease slot runs as a denied batch.
	ds, err = s.ApplyBatch(t.Context(), []floodgate.Request{lease(a+"2", "y"), request(b, fw, t0)})
	if err != nil || ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 1 || ds[1].Allowed {
		t.Fatalf("lease and a full window: %+v, %v; want both denied, the lease's slot unchanged", ds, err)
	}
	if d := peek(t, s, a+"2", conc, t0); d.Remaining != 1 {
		t.Errorf("the lease of a denied batch was taken: %+v", d)
	}
	// The lease denies: the other slot gives its unit back.
	ds, err = s.ApplyBatch(t.Context(), []floodgate.Request{lease(a, "z"), request(b+"2", fw, t0)})
	if err != nil || ds[0].Allowed || ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 1 {
		t.Fatalf("a full lease and a free window: %+v, %v; want both denied, the window unchanged", ds, err)
	}
	if d := peek(t, s, b+"2", fw, t0); d.Remaining != 1 {
		t.Errorf("the window of a batch its lease denied: %+v, want its unit back", d)
	}
	if st := s.CrossSlotStats(); st.Compensated != 1 || st.Failed != 0 {
		t.Errorf("CrossSlotStats %+v, want one compensation (the window's), none failed", st)
	}
}

// TestCrossSlotFailures: a compensation that fails leaves its units taken
// (an over-charge, never an under-charge) and the batch denied, not
// failed; a slot that fails fails the batch, and the others give back.
func TestCrossSlotFailures(t *testing.T) {
	var failRefund, failBatch atomic.Bool
	s := slotStore(t, func(sc *script, keys []string) bool {
		return sc == scripts.refund && failRefund.Load() || sc == scripts.batch && failBatch.Load() && strings.HasSuffix(keys[0], "free}")
	})
	a, b := twoSlots(t, s)
	tenant := limitOf(floodgate.FixedWindow, 10, time.Minute)
	user := limitOf(floodgate.FixedWindow, 1, time.Minute)
	rs := func(u string) []floodgate.Request {
		return []floodgate.Request{request(a, tenant, t0), request(u, user, t0)}
	}
	if ds, err := s.ApplyBatch(t.Context(), rs(b)); err != nil || !floodgate.Combine(ds).Allowed {
		t.Fatalf("first batch: %+v, %v", ds, err)
	}
	failRefund.Store(true)
	ds, err := s.ApplyBatch(t.Context(), rs(b))
	failRefund.Store(false)
	if err != nil || ds[0].Allowed || ds[0].RetryAfter != 0 || ds[1].Allowed {
		t.Fatalf("a batch whose compensation failed: %+v, %v; want denied, no error", ds, err)
	}
	if d := peek(t, s, a, tenant, t0); d.Remaining != 8 {
		t.Errorf("tenant after a failed compensation: %d remaining, want 8 (the unit stays taken)", d.Remaining)
	}
	if st := s.CrossSlotStats(); st.Failed != 1 || st.Units != 1 || st.Refunded != 0 {
		t.Errorf("CrossSlotStats %+v, want one failed compensation of one unit", st)
	}
	// One slot fails: the batch fails, and the slot that admitted gives
	// back.
	failBatch.Store(true)
	_, err = s.ApplyBatch(t.Context(), rs(b+"free"))
	failBatch.Store(false)
	if !errors.Is(err, errInjected) {
		t.Fatalf("a batch whose slots failed: %v, want the failure", err)
	}
	if d := peek(t, s, a, tenant, t0); d.Remaining != 8 {
		t.Errorf("tenant after a failed batch: %d remaining, want 8", d.Remaining)
	}
}

// TestCrossSlotCompensation runs concurrent batches of a tenant's limit
// and a user's (and a quarter of them a region's), in different slots of
// a real Redis Cluster, many of which a user denies after the tenant
// admitted: the admitted batches never exceed either limit, the tenant's
// count is exactly the admitted batches once they are done (every
// compensation gave its unit back), and the test reports the units the
// compensated slots held meanwhile, which others saw taken. The users'
// limits add up to the tenant's, so the tenant denies only while such
// units fill it: a batch it denied then, which its user could have
// taken, is what compensation costs.
func TestCrossSlotCompensation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	c := newRueidisCluster(t, cl.Addrs())
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	s, err := New(c, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const (
		tenantLimit = 150
		users       = 30
		userLimit   = 5
		callers     = 16
		batches     = 600
	)
	tenant := limitOf(floodgate.FixedWindow, tenantLimit, time.Hour)
	user := limitOf(floodgate.GCRA, userLimit, time.Hour)
	region := limitOf(floodgate.SlidingWindow, 1000, time.Hour)
	var (
		next          atomic.Int64
		admitted      atomic.Int64
		byTenant      atomic.Int64 // batches the tenant alone denied
		perUser       [users]atomic.Int64
		wg            sync.WaitGroup
		errMu         sync.Mutex
		errs          []error
		threeSlotRuns atomic.Int64
	)
	for w := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for next.Add(1) <= batches {
				u := rng.IntN(users)
				rs := []floodgate.Request{
					{Key: "acme", Limit: tenant, Cost: 1},
					{Key: fmt.Sprintf("acme/user:%d", u), Limit: user, Cost: 1},
				}
				if rng.IntN(4) == 0 {
					rs = append(rs, floodgate.Request{Key: "eu", Limit: region, Cost: 1})
					threeSlotRuns.Add(1)
				}
				ds, err := s.ApplyBatch(context.Background(), rs)
				if err != nil {
					errMu.Lock()
					errs = append(errs, err)
					errMu.Unlock()
					return
				}
				switch {
				case floodgate.Combine(ds).Allowed:
					admitted.Add(1)
					perUser[u].Add(1)
				case ds[0].RetryAfter > 0 && ds[1].RetryAfter == 0 && (len(ds) == 2 || ds[2].RetryAfter == 0):
					byTenant.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	n := admitted.Load()
	if n > tenantLimit {
		t.Errorf("%d batches admitted, above the tenant's limit of %d", n, tenantLimit)
	}
	for u := range users {
		if got := perUser[u].Load(); got > userLimit {
			t.Errorf("user %d: %d batches admitted, above the limit of %d", u, got, userLimit)
		}
	}
	d := peek(t, s, "acme", tenant, time.Time{})
	if got := tenantLimit - d.Remaining; got != n {
		t.Errorf("the tenant counts %d units for %d admitted batches: compensation left %d", got, n, got-n)
	}
	st := s.CrossSlotStats()
	if st.Calls != batches || st.Failed != 0 || st.Refunded != st.Units {
		t.Errorf("CrossSlotStats %+v, want %d calls, every compensation complete", st, batches)
	}
	t.Logf("%d batches (%d over three slots), %d admitted of the users' %d; %d slot runs compensated, holding %d units meanwhile (%.2f per batch); %d batches denied by the tenant alone, while compensated slots held its units",
		batches, threeSlotRuns.Load(), n, users*userLimit, st.Compensated, st.Units, float64(st.Units)/batches, byTenant.Load())
}
