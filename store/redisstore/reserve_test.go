package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// reserve reserves rs under id, failing the test on an error.
func reserve(t *testing.T, s *Store, id string, ttl time.Duration, release bool, rs ...floodgate.Request) floodgate.HoldResult {
	t.Helper()
	res, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: rs, ID: id, TTL: ttl, Release: release})
	if err != nil {
		t.Fatalf("Reserve(%s): %v", id, err)
	}
	return res
}

// holdFields reads the hold of id on the state at key.
func holdFields(t *testing.T, c rueidis.Client, key, id string) map[string]string {
	t.Helper()
	m, err := c.Do(t.Context(), c.B().Hgetall().Key(holdKey(key, id)).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pttl is key's PTTL.
func pttl(t *testing.T, c rueidis.Client, key string) time.Duration {
	t.Helper()
	ms, err := c.Do(t.Context(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestReserveKeys checks the keys a reservation makes: a hold beside its
// state, in its slot, with the fields docs/redis.md lists and a TTL
// until its expiry plus the retention; an index entry only for a
// reservation with release, in an index with a TTL. Every key the test
// leaves has a TTL (testStore checks it at the end), after reserves,
// commits, cancels, denials, expiries and sweeps, on every algorithm.
func TestReserveKeys(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), &Options{HoldRetention: 5 * time.Second, HoldSweep: -1})
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	key := s.Key("k", l)
	reserve(t, s, "plain", time.Minute, false, floodgate.Request{Key: "k", Limit: l, Cost: 4})
	h := holdFields(t, c, key, "plain")
	for f, want := range map[string]string{"alg": "fixed_window", "state": "1", "units": "4", "release": "0", "actual": "0",
		"limit": "10", "period": "3600000000", "burst": "0", "flags": "0", "skew": "0"} {
		if h[f] != want {
			t.Errorf("hold field %s = %q, want %q (%v)", f, h[f], want, h)
		}
	}
	at, _ := strconv.ParseInt(h["at"], 10, 64)
	expires, _ := strconv.ParseInt(h["expires"], 10, 64)
	if expires-at != time.Minute.Microseconds() {
		t.Errorf("hold at %d, expires %d: want a minute apart", at, expires)
	}
	if ttl := pttl(t, c, holdKey(key, "plain")); ttl <= time.Minute || ttl > time.Minute+5*time.Second {
		t.Errorf("hold's TTL %v, want the hold's minute and the 5 s of retention", ttl)
	}
	if keySlot(holdKey(key, "plain")) != keySlot(key) {
		t.Error("the hold is not in its state's slot")
	}
	if n, _ := c.Do(t.Context(), c.B().Exists().Key(s.indexKey(0)).Build()).AsInt64(); n != 0 {
		t.Error("a reservation without release is in the sweep's index")
	}
	reserve(t, s, "rel", time.Minute, true, floodgate.Request{Key: "k", Limit: l, Cost: 1})
	if ttl := pttl(t, c, s.indexKey(0)); ttl < time.Minute {
		t.Errorf("the index's TTL %v, want at least the hold's minute", ttl)
	}
	// Every algorithm, every step: the keys left have TTLs (checked at
	// the end), and the holds are hashes of the fields above.
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.SlidingWindowLog, floodgate.TokenBucket, floodgate.GCRA} {
		l := limitOf(alg, 5, time.Minute)
		for i, step := range []string{"commit", "cancel", "deny", "expire", "sweep"} {
			k := string(alg) + "/" + step
			id := "r" + strconv.Itoa(i)
			ttl := time.Minute
			if step == "expire" || step == "sweep" {
				ttl = 50 * time.Millisecond
			}
			cost := int64(3)
			if step == "deny" {
				cost = 6
			}
			if res := reserve(t, s, id, ttl, step == "sweep", floodgate.Request{Key: k, Limit: l, Cost: cost}); res.Decisions[0].Allowed == (step == "deny") {
				t.Fatalf("%s: reserve %+v", k, res)
			}
			settle := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: k, Limit: l}}, ID: id, Actual: 1}
			switch step {
			case "cancel":
				settle.Actual, settle.Cancel = 0, true
			case "expire":
				time.Sleep(60 * time.Millisecond)
			case "sweep":
				time.Sleep(60 * time.Millisecond)
				if n, err := s.SweepHolds(t.Context()); err != nil || n != 1 {
					t.Fatalf("%s: SweepHolds %d, %v; want 1 expired", k, n, err)
				}
			}
			_, err := s.Settle(t.Context(), settle)
			switch {
			case step == "deny" && !errors.Is(err, floodgate.ErrConflict),
				(step == "expire" || step == "sweep") && !errors.Is(err, floodgate.ErrExpired),
				(step == "commit" || step == "cancel") && err != nil:
				t.Errorf("%s: settle: %v", k, err)
			}
		}
	}
}

// TestReserveForeignHold: a hold key that holds something else than a
// hold is an error wrapping ErrUnexpectedReply, and nothing changes.
func TestReserveForeignHold(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	r := floodgate.Request{Key: "k", Limit: l, Cost: 4}
	hk := holdKey(s.Key("k", l), "x")
	for _, tc := range []struct {
		name string
		cmd  func() rueidis.Completed
	}{
		{"a string", func() rueidis.Completed { return c.B().Set().Key(hk).Value("junk").Px(time.Minute).Build() }},
		{"a hash of no hold", func() rueidis.Completed {
			return c.B().Hset().Key(hk).FieldValue().FieldValue("state", "9").Build()
		}},
	} {
		c.Do(t.Context(), c.B().Del().Key(hk).Build())
		if err := c.Do(t.Context(), tc.cmd()).Error(); err != nil {
			t.Fatal(err)
		}
		c.Do(t.Context(), c.B().Pexpire().Key(hk).Milliseconds(60_000).Build())
		if _, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{r}, ID: "x", TTL: time.Minute}); !errors.Is(err, floodgate.ErrUnexpectedReply) {
			t.Errorf("reserve over %s: %v, want ErrUnexpectedReply", tc.name, err)
		}
		if _, err := s.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{r}, ID: "x", Cancel: true}); !errors.Is(err, floodgate.ErrUnexpectedReply) {
			t.Errorf("settle over %s: %v, want ErrUnexpectedReply", tc.name, err)
		}
		if d := peek(t, s, "k", l, time.Time{}); d.Remaining != 10 {
			t.Errorf("after %s: %d remaining, want 10", tc.name, d.Remaining)
		}
	}
}

// TestSweepCrashedCaller: a caller reserves with release and crashes
// before it settles; other instances' sweeps (two background sweepers
// and a caller of SweepHolds, all at once) give the units back once, soon
// after the expiry, though nobody touches the reservation; a settle
// after that gets the expiry's answer.
func TestSweepCrashedCaller(t *testing.T) {
	t.Run("evalsha", func(t *testing.T) { testSweepCrashedCaller(t, Options{}) })
	t.Run("functions", func(t *testing.T) { testSweepCrashedCaller(t, Options{Functions: true}) })
}

func testSweepCrashedCaller(t *testing.T, o Options) {
	addr := standaloneAddr(t)
	prefix := testPrefix(t)
	c := newRueidis(t, addr)
	checkTTLsAtEnd(t, c, prefix)
	open := func(sweep time.Duration) *Store {
		o := o
		o.Prefix, o.HoldSweep = prefix, sweep
		s, err := New(newRueidis(t, addr), &o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	const interval = 20 * time.Millisecond
	crashed := open(-1)
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	const ttl = 300 * time.Millisecond
	res := reserve(t, crashed, "job-1", ttl, true, floodgate.Request{Key: "k", Limit: l, Cost: 6})
	if d := peek(t, crashed, "k", l, time.Time{}); !res.Decisions[0].Allowed || d.Remaining != 4 {
		t.Fatalf("reserve 6 of 10: %+v, then %d remaining", res, d.Remaining)
	}
	// Others take 3 meanwhile: a second refund would give those back too.
	if d, err := crashed.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 3}); err != nil || !d.Allowed {
		t.Fatalf("3 more: %+v, %v", d, err)
	}
	crashed.Close() // the caller is gone: nobody settles job-1
	expires := res.Expires

	sweepers := []*Store{open(interval), open(interval)}
	for _, s := range sweepers {
		s.startSweeper()
	}
	manual := open(-1)
	var swept atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval / 2):
			}
			n, err := manual.SweepHolds(context.Background())
			if err != nil {
				t.Errorf("SweepHolds: %v", err)
				return
			}
			swept.Add(int64(n))
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	var back time.Time
	for time.Now().Before(deadline) {
		if d := peek(t, manual, "k", l, time.Time{}); d.Remaining == 7 {
			back = time.Now()
			break
		}
		time.Sleep(time.Millisecond)
	}
	if back.IsZero() {
		t.Fatal("the units of the crashed caller's reservation never came back")
	}
	// Let every sweeper pass a few more times.
	time.Sleep(10 * interval)
	close(stop)
	wg.Wait()
	if d := peek(t, manual, "k", l, time.Time{}); d.Remaining != 7 {
		t.Errorf("after more sweeps: %d remaining, want 7 (the 6 units given back once, the other 3 kept)", d.Remaining)
	}
	h := holdFields(t, c, crashed.Key("k", l), "job-1")
	if h["state"] != strconv.Itoa(int(5)) || h["refunded"] != "6" {
		t.Errorf("the hold after the sweep: %v, want expired (5) with 6 refunded", h)
	}
	st, err := manual.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: "k", Limit: l}}, ID: "job-1", Actual: 2})
	if !errors.Is(err, floodgate.ErrExpired) || len(st) != 1 || st[0].Refunded != 6 {
		t.Errorf("commit after the sweep: %+v, %v; want ErrExpired and the expiry's 6 given back", st, err)
	}
	if n, _ := c.Do(t.Context(), c.B().Zcard().Key(manual.indexKey(0)).Build()).AsInt64(); n != 0 {
		t.Errorf("the index holds %d entries after the sweep, want 0", n)
	}
	t.Logf("given back %v after the expiry (sweep interval %v); %d of the expiries by SweepHolds, the others by the background sweepers",
		back.Sub(expires).Round(time.Millisecond), interval, swept.Load())
}

// TestCrossSlotReserve checks reservations over several slots (slotConn):
// all or nothing, a retry replayed, a conflict found in one slot undoing
// the others, settles, and a compensation that failed completed by a
// retry.
func TestCrossSlotReserve(t *testing.T) {
	var failDeny atomic.Bool
	c := newRueidis(t, standaloneAddr(t))
	prefix := testPrefix(t)
	checkTTLsAtEnd(t, c, prefix)
	s, err := NewWithConn(denyConn{slotConn{Conn: rueidisConn{c}}, &failDeny}, &Options{Prefix: prefix, HoldSweep: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b := twoSlots(t, s)
	tenant := floodgate.Request{Key: a, Limit: limitOf(floodgate.TokenBucket, 10, time.Hour), Cost: 3, Now: t0}
	user := floodgate.Request{Key: b, Limit: limitOf(floodgate.FixedWindow, 1, time.Hour), Cost: 1, Now: t0}
	if res := reserve(t, s, "a", time.Minute, false, tenant, user); !floodgate.Combine(res.Decisions).Allowed || res.Replayed {
		t.Fatalf("first reserve: %+v", res)
	}
	res := reserve(t, s, "b", time.Minute, false, tenant, user)
	if res.Decisions[0].Allowed || res.Decisions[0].RetryAfter != 0 || res.Decisions[0].Remaining != 7 || res.Decisions[1].Allowed {
		t.Fatalf("reserve the user denies: %+v, want both denied and the tenant's 7 untouched", res)
	}
	if h := holdFields(t, c, s.Key(a, tenant.Limit), "b"); h["state"] != "2" {
		t.Errorf("the tenant's hold of a denied reserve: %v, want denied (2)", h)
	}
	if res := reserve(t, s, "b", time.Minute, false, tenant, user); !res.Replayed || res.Decisions[0].Allowed {
		t.Errorf("retry of the denied reserve: %+v, want denied, replayed", res)
	}
	if res := reserve(t, s, "a", time.Minute, false, tenant, user); !res.Replayed || !res.Decisions[0].Allowed || res.Decisions[0].Remaining != 7 {
		t.Errorf("retry of the held reserve: %+v, want held, replayed, nothing taken again", res)
	}
	// A reserve of other keys with a known ID conflicts, and what its
	// other slot made is undone.
	other := user
	other.Key = b + "/other"
	if _, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{tenant, other}, ID: "a", TTL: time.Minute}); !errors.Is(err, floodgate.ErrConflict) {
		t.Errorf("reserve of other keys with a known ID: %v, want ErrConflict", err)
	}
	if d := peek(t, s, other.Key, other.Limit, t0); d.Remaining != 1 {
		t.Errorf("the other key after the conflict: %d remaining, want 1 (undone)", d.Remaining)
	}
	if n, _ := c.Do(t.Context(), c.B().Exists().Key(holdKey(s.Key(other.Key, other.Limit), "a")).Build()).AsInt64(); n != 0 {
		t.Error("the conflicting reserve left a hold on the other key")
	}
	if _, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{tenant, user, other}, ID: "a", TTL: time.Minute}); !errors.Is(err, floodgate.ErrConflict) {
		t.Errorf("reserve of three keys with the ID of two: %v, want ErrConflict", err)
	}
	// One of the keys alone is in one slot: one script, which replays as
	// memstore does.
	if res, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{tenant}, ID: "a", TTL: time.Minute}); err != nil || !res.Replayed {
		t.Errorf("reserve of one of the two keys with their ID: %+v, %v; want replayed, as memstore", res, err)
	}
	// Settle across the slots, and again.
	settle := floodgate.SettleRequest{Requests: []floodgate.Request{tenant, user}, ID: "a", Actual: 1}
	st, err := s.Settle(t.Context(), settle)
	if err != nil || st[0].Refunded != 2 || st[1].Refunded != 0 || st[0].Replayed {
		t.Fatalf("commit 1: %+v, %v", st, err)
	}
	if st, err := s.Settle(t.Context(), settle); err != nil || !st[0].Replayed || !st[1].Replayed || st[0].Refunded != 2 {
		t.Errorf("commit 1 again: %+v, %v; want the first answer", st, err)
	}
	if _, err := s.Settle(t.Context(), floodgate.SettleRequest{Requests: settle.Requests, ID: "never"}); !errors.Is(err, floodgate.ErrUnknownReservation) {
		t.Errorf("settle of an unknown ID: %v", err)
	}
	// A denial whose compensation failed leaves the tenant's hold held
	// (its units taken); a retry of the reserve completes the denial.
	user2 := user
	user2.Key = b + "/2"
	reserve(t, s, "fill", time.Minute, false, user2)
	failDeny.Store(true)
	res = reserve(t, s, "c", time.Minute, false, tenant, user2)
	failDeny.Store(false)
	if res.Decisions[0].Allowed || res.Decisions[1].Allowed {
		t.Fatalf("reserve whose compensation failed: %+v, want denied", res)
	}
	if d := peek(t, s, a, tenant.Limit, t0); d.Remaining != 6 {
		t.Errorf("tenant after a failed compensation: %d remaining, want 6 (3 still held)", d.Remaining)
	}
	if res := reserve(t, s, "c", time.Minute, false, tenant, user2); !res.Replayed || res.Decisions[0].Allowed {
		t.Errorf("retry of the reserve whose compensation failed: %+v, want denied, replayed", res)
	}
	if d := peek(t, s, a, tenant.Limit, t0); d.Remaining != 9 {
		t.Errorf("tenant after the retry: %d remaining, want 9", d.Remaining)
	}
	if st := s.CrossSlotStats(); st.Failed != 1 {
		t.Errorf("CrossSlotStats %+v, want one failed compensation", st)
	}
}

// denyConn fails the settle script's deny mode while fail is set.
type denyConn struct {
	slotConn
	fail *atomic.Bool
}

func (c denyConn) EvalSHA(ctx context.Context, sha string, keys, args []string, w Wait) ([]int64, error) {
	if sha == scripts.settle.sha && args[0] == modeDeny && c.fail.Load() {
		return nil, errInjected
	}
	return c.slotConn.EvalSHA(ctx, sha, keys, args, w)
}

// TestReserveOptions checks the options of reservations.
func TestReserveOptions(t *testing.T) {
	c := newRueidis(t, standaloneAddr(t))
	for _, o := range []Options{{HoldRetention: -1}, {HoldRetention: 1 << 62}} {
		if _, err := New(c, &o); err == nil || !strings.Contains(err.Error(), "HoldRetention") {
			t.Errorf("New(%+v): %v, want an error naming HoldRetention", o, err)
		}
	}
}

// TestRefundForgetsDenial: a settle that gives units back forgets the
// store's cached denial of the key (Options.DenyCache), which no longer
// holds.
func TestRefundForgetsDenial(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), &Options{DenyCache: 100})
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	reserve(t, s, "all", time.Minute, false, floodgate.Request{Key: "k", Limit: l, Cost: 10})
	for range 2 {
		if d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1}); err != nil || d.Allowed {
			t.Fatalf("over the hold: %+v, %v; want denied", d, err)
		}
	}
	if st := s.LocalStats(); st.DenyCache != 1 {
		t.Fatalf("LocalStats %+v, want the second denial from the cache", st)
	}
	if _, err := s.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: "k", Limit: l}}, ID: "all", Actual: 4}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Cost: 1}); err != nil || !d.Allowed || d.Remaining != 5 {
		t.Errorf("after 6 given back: %+v, %v; want allowed, 5 remaining", d, err)
	}
}
