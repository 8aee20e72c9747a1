package floodgatetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// reservable are the algorithms with reservations: all but Concurrency.
func reservable() []floodgate.Algorithm {
	var out []floodgate.Algorithm
	for _, a := range floodgate.Algorithms {
		if (floodgate.Limit{Algorithm: a}).Kind().Reservable() {
			out = append(out, a)
		}
	}
	return out
}

// testReserve tests a floodgate.Reserver: the steps and their idempotency,
// all or nothing across keys, races for the last units and for one
// refund, expiry, and bad input. It skips a store that is no Reserver.
func (s *suite) testReserve(t *testing.T) {
	rv, ok := s.store.(floodgate.Reserver)
	if !ok {
		t.Skip("the store is not a floodgate.Reserver")
	}
	t.Parallel()
	t.Run("steps", func(t *testing.T) { s.testReserveSteps(t, rv) })
	t.Run("all_or_nothing", func(t *testing.T) { s.testReserveAllOrNothing(t, rv) })
	t.Run("race_last_units", func(t *testing.T) { s.testReserveRace(t, rv) })
	t.Run("race_refund", func(t *testing.T) { s.testRefundRace(t, rv) })
	t.Run("expiry", func(t *testing.T) { s.testReserveExpiry(t, rv) })
	t.Run("invalid", func(t *testing.T) { s.testReserveInvalid(t, rv) })
	t.Run("differential", func(t *testing.T) { s.testReserveDifferential(t, rv) })
	t.Run("wait", func(t *testing.T) { s.testWaitDifferential(t, rv) })
	t.Run("read_holds", func(t *testing.T) { s.testReadHolds(t, rv) })
}

// hold reserves cost of key under l as id, failing the test on an error.
func (s *suite) hold(t *testing.T, rv floodgate.Reserver, id string, ttl time.Duration, rs ...floodgate.Request) floodgate.HoldResult {
	t.Helper()
	res, err := rv.Reserve(t.Context(), floodgate.HoldRequest{Requests: rs, ID: id, TTL: ttl})
	if err != nil {
		t.Fatalf("Reserve(%s): %v", id, err)
	}
	if len(res.Decisions) != len(rs) {
		t.Fatalf("Reserve(%s): %d decisions for %d requests", id, len(res.Decisions), len(rs))
	}
	return res
}

func (s *suite) testReserveSteps(t *testing.T, rv floodgate.Reserver) {
	t.Parallel()
	for _, alg := range reservable() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := s.limit(t, lim(alg, 10, time.Minute))
			key := s.key(t, "k")
			at := s.at(time.Second)
			r := floodgate.Request{Key: key, Limit: l, Cost: 6, Now: at}
			res := s.hold(t, rv, "r1", time.Minute, r)
			if d := res.Decisions[0]; !d.Allowed || d.Remaining != 4 || res.Replayed {
				t.Fatalf("reserve 6 of 10: %+v", res)
			}
			if again := s.hold(t, rv, "r1", time.Minute, r); !again.Replayed || !again.Decisions[0].Allowed || again.Decisions[0].Remaining != 4 {
				t.Errorf("reserve again: %+v, want the first answer, replayed, and nothing taken", again)
			}
			other := r
			other.Cost = 5
			if _, err := rv.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{other}, ID: "r1", TTL: time.Minute}); !errors.Is(err, floodgate.ErrConflict) {
				t.Errorf("reserve 5 with the ID of a reserve of 6: %v, want ErrConflict", err)
			}
			settle := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Now: at}}, ID: "r1", Actual: 2}
			st, err := rv.Settle(t.Context(), settle)
			if err != nil || len(st) != 1 || st[0].Refunded != 4 || st[0].Replayed || st[0].Decision.Remaining != 8 {
				t.Fatalf("commit 2 of 6: %+v, %v; want 4 given back and 8 remaining", st, err)
			}
			again, err := rv.Settle(t.Context(), settle)
			if err != nil || len(again) != 1 || !again[0].Replayed || again[0].Refunded != 4 || again[0].Decision.Remaining != 8 {
				t.Errorf("commit 2 again: %+v, %v; want the first answer, replayed, and nothing given back twice", again, err)
			}
			for _, bad := range []floodgate.SettleRequest{{Actual: 3}, {Cancel: true}} {
				bad.Requests, bad.ID = settle.Requests, settle.ID
				if _, err := rv.Settle(t.Context(), bad); !errors.Is(err, floodgate.ErrConflict) {
					t.Errorf("settle %+v after a commit of 2: %v, want ErrConflict", bad, err)
				}
			}
			if d := s.apply(t, floodgate.Request{Key: key, Limit: l, Now: at}); d.Remaining != 8 {
				t.Errorf("after the conflicts: %d remaining, want 8 (nothing changed)", d.Remaining)
			}
			unknown := settle
			unknown.ID = "never-made"
			if _, err := rv.Settle(t.Context(), unknown); !errors.Is(err, floodgate.ErrUnknownReservation) {
				t.Errorf("commit of an unknown ID: %v, want ErrUnknownReservation", err)
			}
			// Excess: taken while there is room, short when not.
			key2 := s.key(t, "excess")
			s.hold(t, rv, "r2", time.Minute, floodgate.Request{Key: key2, Limit: l, Cost: 2, Now: at})
			st, err = rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key2, Limit: l, Now: at}}, ID: "r2", Actual: 7})
			if err != nil || st[0].Charged != 5 || st[0].Short != 0 || st[0].Decision.Remaining != 3 {
				t.Errorf("commit 7 of 2: %+v, %v; want 5 charged and 3 remaining", st, err)
			}
			s.hold(t, rv, "r3", time.Minute, floodgate.Request{Key: key2, Limit: l, Cost: 1, Now: at})
			st, err = rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key2, Limit: l, Now: at}}, ID: "r3", Actual: 9})
			if err != nil || st[0].Charged != 0 || st[0].Short != 8 || st[0].Decision.Remaining != 2 {
				t.Errorf("commit 9 of 1 with 2 left: %+v, %v; want 8 short and nothing taken", st, err)
			}
		})
	}
}

// testReserveAllOrNothing: a reserve over two keys that one denies holds
// nothing on the other, and its retry is denied too.
func (s *suite) testReserveAllOrNothing(t *testing.T, rv floodgate.Reserver) {
	t.Parallel()
	at := s.at(time.Second)
	tenant := floodgate.Request{Key: s.key(t, "tenant"), Limit: s.limit(t, lim(floodgate.FixedWindow, 5, time.Minute)), Cost: 1, Now: at}
	user := floodgate.Request{Key: s.key(t, "user"), Limit: s.limit(t, lim(floodgate.GCRA, 1, time.Minute)), Cost: 1, Now: at}
	if res := s.hold(t, rv, "a", time.Minute, tenant, user); !res.Decisions[0].Allowed || !res.Decisions[1].Allowed {
		t.Fatalf("first reserve: %+v", res)
	}
	for i := range 3 {
		res := s.hold(t, rv, fmt.Sprintf("b%d", i), time.Minute, tenant, user)
		if res.Decisions[0].Allowed || res.Decisions[1].Allowed || res.Decisions[0].Remaining != 4 {
			t.Fatalf("reserve %d denied by the user: %+v, want both denied and the tenant's 4 left", i, res)
		}
	}
	if res := s.hold(t, rv, "b0", time.Minute, tenant, user); !res.Replayed || res.Decisions[0].Allowed {
		t.Errorf("retry of a denied reserve: %+v, want the first answer (denied), replayed", res)
	}
	if _, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{tenant, user}, ID: "b0", Cancel: true}); !errors.Is(err, floodgate.ErrConflict) {
		t.Errorf("cancel of a denied reserve: %v, want ErrConflict", err)
	}
	if d := s.apply(t, floodgate.Request{Key: tenant.Key, Limit: tenant.Limit, Now: at}); d.Remaining != 4 {
		t.Errorf("tenant after three denied reserves: %d remaining, want 4", d.Remaining)
	}
}

// testReserveRace: ten clients reserving one unit each of the last five
// get exactly five holds, for every algorithm.
func (s *suite) testReserveRace(t *testing.T, rv floodgate.Reserver) {
	t.Parallel()
	const clients, left = 10, 5
	for _, alg := range reservable() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := s.limit(t, lim(alg, 8, time.Minute))
			for round := range rounds(20) {
				key := s.key(t, fmt.Sprint(round))
				at := s.at(time.Second)
				s.apply(t, floodgate.Request{Key: key, Limit: l, Cost: 8 - left, Now: at})
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					won   [clients]bool
					errs  [clients]error
				)
				for i := range clients {
					wg.Go(func() {
						<-start
						res, err := rv.Reserve(t.Context(), floodgate.HoldRequest{
							Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 1, Now: at}}, ID: fmt.Sprintf("c%d", i), TTL: time.Minute})
						errs[i] = err
						won[i] = err == nil && res.Decisions[0].Allowed
					})
				}
				close(start)
				wg.Wait()
				n := 0
				for i := range clients {
					if errs[i] != nil {
						t.Fatalf("round %d, client %d: %v", round, i, errs[i])
					}
					if won[i] {
						n++
					}
				}
				if n != left {
					t.Fatalf("round %d: %d of %d clients got a hold of the last %d units", round, n, clients, left)
				}
			}
		})
	}
}

// testRefundRace: ten concurrent retries of one commit give back exactly
// once: one settles, nine get its answer replayed, and the budget is back
// to what one refund leaves.
func (s *suite) testRefundRace(t *testing.T, rv floodgate.Reserver) {
	t.Parallel()
	const clients = 10
	for _, alg := range reservable() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := s.limit(t, lim(alg, 10, time.Minute))
			for round := range rounds(20) {
				key := s.key(t, fmt.Sprint(round))
				at := s.at(time.Second)
				s.hold(t, rv, "r", time.Minute, floodgate.Request{Key: key, Limit: l, Cost: 5, Now: at})
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					sts   [clients]floodgate.Settlement
					errs  [clients]error
				)
				for i := range clients {
					wg.Go(func() {
						<-start
						st, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Now: at}}, ID: "r", Actual: 1})
						errs[i] = err
						if err == nil {
							sts[i] = st[0]
						}
					})
				}
				close(start)
				wg.Wait()
				settled := 0
				for i := range clients {
					if errs[i] != nil {
						t.Fatalf("round %d, client %d: %v", round, i, errs[i])
					}
					if sts[i].Refunded != 4 {
						t.Fatalf("round %d, client %d: %+v, want 4 given back (first or replayed)", round, i, sts[i])
					}
					if !sts[i].Replayed {
						settled++
					}
				}
				if settled != 1 {
					t.Fatalf("round %d: %d of %d retries settled, want 1", round, settled, clients)
				}
				if d := s.apply(t, floodgate.Request{Key: key, Limit: l, Now: at}); d.Remaining != 9 {
					t.Fatalf("round %d: %d remaining after one commit of 1, want 9 (the refund given once)", round, d.Remaining)
				}
			}
		})
	}
}

// testReserveExpiry: a commit after the TTL is too late; the units stayed
// charged, or were given back when the reservation said Release, once.
func (s *suite) testReserveExpiry(t *testing.T, rv floodgate.Reserver) {
	if s.opts.ServerTime {
		t.Skip("moves time")
	}
	t.Parallel()
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) {
			t.Parallel()
			l := lim(floodgate.FixedWindow, 10, time.Minute)
			key := s.key(t, "k")
			r := floodgate.Request{Key: key, Limit: l, Cost: 6, Now: s.at(time.Second)}
			if _, err := rv.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{r}, ID: "r", TTL: time.Second, Release: release}); err != nil {
				t.Fatal(err)
			}
			late := s.at(2 * time.Second)
			settle := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Now: late}}, ID: "r", Actual: 1}
			st, err := rv.Settle(t.Context(), settle)
			want := int64(0)
			if release {
				want = 6
			}
			if !errors.Is(err, floodgate.ErrExpired) || len(st) != 1 || st[0].Refunded != want {
				t.Fatalf("commit after the TTL: %+v, %v; want ErrExpired with %d given back", st, err, want)
			}
			if st, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: settle.Requests, ID: "r", Cancel: true}); !errors.Is(err, floodgate.ErrExpired) || st[0].Refunded != want {
				t.Errorf("cancel after the TTL: %+v, %v; want ErrExpired and the expiry's answer", st, err)
			}
			if d := s.apply(t, floodgate.Request{Key: key, Limit: l, Now: late}); d.Remaining != 4+want {
				t.Errorf("after the expiry: %d remaining, want %d", d.Remaining, 4+want)
			}
		})
	}
	// The last microsecond of the TTL is still in time.
	t.Run("just_in_time", func(t *testing.T) {
		t.Parallel()
		l := lim(floodgate.FixedWindow, 10, time.Minute)
		key := s.key(t, "k")
		r := floodgate.Request{Key: key, Limit: l, Cost: 6, Now: s.at(time.Second)}
		if _, err := rv.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{r}, ID: "r", TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		st, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Now: s.at(2*time.Second - time.Microsecond)}}, ID: "r", Actual: 1})
		if err != nil || st[0].Refunded != 5 {
			t.Errorf("commit a microsecond before the expiry: %+v, %v; want settled, 5 given back", st, err)
		}
	})
}

// testReserveInvalid: bad reservations are errors wrapping
// ErrInvalidRequest or ErrInvalidLimit, and hold nothing.
func (s *suite) testReserveInvalid(t *testing.T, rv floodgate.Reserver) {
	t.Parallel()
	l := s.limit(t, lim(floodgate.FixedWindow, 10, time.Minute))
	ok := floodgate.Request{Key: s.key(t, "k"), Limit: l, Cost: 1, Now: s.at(0)}
	conc := ok
	conc.Limit = s.limit(t, lim(floodgate.Concurrency, 10, time.Minute))
	for _, tc := range []struct {
		name string
		r    floodgate.HoldRequest
		want error
	}{
		{"no requests", floodgate.HoldRequest{ID: "x", TTL: time.Second}, floodgate.ErrInvalidRequest},
		{"empty ID", floodgate.HoldRequest{Requests: []floodgate.Request{ok}, TTL: time.Second}, floodgate.ErrInvalidRequest},
		{"ID with a colon", floodgate.HoldRequest{Requests: []floodgate.Request{ok}, ID: "a:b", TTL: time.Second}, floodgate.ErrInvalidRequest},
		{"zero TTL", floodgate.HoldRequest{Requests: []floodgate.Request{ok}, ID: "x"}, floodgate.ErrInvalidRequest},
		{"TTL above the maximum", floodgate.HoldRequest{Requests: []floodgate.Request{ok}, ID: "x", TTL: floodgate.MaxHoldTTL + time.Second}, floodgate.ErrInvalidRequest},
		{"concurrency", floodgate.HoldRequest{Requests: []floodgate.Request{conc}, ID: "x", TTL: time.Second}, floodgate.ErrInvalidLimit},
	} {
		if _, err := rv.Reserve(t.Context(), tc.r); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{ok}, ID: "x", Actual: -1}); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("settle of cost -1: %v, want ErrInvalidRequest", err)
	}
	if d := s.apply(t, floodgate.Request{Key: ok.Key, Limit: l, Now: s.at(0)}); d.Remaining != 10 {
		t.Errorf("after invalid reserves: %d remaining, want 10", d.Remaining)
	}
}

// testReadHolds tests a floodgate.HoldReader: ReadHolds answers as Settle
// would (unknown, conflict, expired, replayed), with the units, the
// durability and, for a durable hold, the window the store recorded at
// the reserve, and changes nothing.
func (s *suite) testReadHolds(t *testing.T, rv floodgate.Reserver) {
	hr, ok := rv.(floodgate.HoldReader)
	if !ok {
		t.Skip("the store is not a floodgate.HoldReader")
	}
	t.Parallel()
	aligned := s.limit(t, floodgate.Limit{Limit: 10, Period: time.Minute, Durable: true})
	first := s.limit(t, floodgate.Limit{Limit: 10, Period: time.Minute, Window: floodgate.FirstHit, Durable: true})
	plain := s.limit(t, lim(floodgate.SlidingWindow, 10, time.Minute))
	ka, kf, kp := s.key(t, "aligned"), s.key(t, "first"), s.key(t, "plain")
	at := s.at(7 * time.Second)
	// A live first-hit window that started 2 s before the hold.
	s.apply(t, floodgate.Request{Key: kf, Limit: first, Cost: 1, Now: s.at(5 * time.Second)})
	res := s.hold(t, rv, "h1", time.Minute,
		floodgate.Request{Key: ka, Limit: aligned, Cost: 6, Now: at},
		floodgate.Request{Key: kf, Limit: first, Cost: 3, Now: at},
		floodgate.Request{Key: kp, Limit: plain, Cost: 2, Now: at})
	if !floodgate.Combine(res.Decisions).Allowed {
		t.Fatalf("reserve: %+v", res)
	}
	names := []floodgate.Request{{Key: ka, Limit: aligned, Now: at}, {Key: kf, Limit: first, Now: at}, {Key: kp, Limit: plain, Now: at}}
	commit := floodgate.SettleRequest{Requests: names, ID: "h1", Actual: 2}
	peek := func() []int64 {
		var out []int64
		for _, n := range names {
			out = append(out, s.apply(t, n).Remaining)
		}
		return out
	}
	before := peek()
	held, err := hr.ReadHolds(t.Context(), commit)
	if err != nil || len(held) != 3 {
		t.Fatalf("ReadHolds: %+v, %v; want 3 holds", held, err)
	}
	for i, want := range []floodgate.HeldUnits{{Units: 6, Durable: true}, {Units: 3, Durable: true}, {Units: 2}} {
		got := held[i]
		if got.Units != want.Units || got.Durable != want.Durable || got.Replayed || got.Durable != !got.Window.IsZero() {
			t.Errorf("ReadHolds[%d] = %+v, want %+v (a window iff durable)", i, got, want)
		}
	}
	if !s.opts.ServerTime {
		if !held[0].Window.Equal(base) || !held[1].Window.Equal(s.at(5*time.Second)) {
			t.Errorf("ReadHolds windows %v and %v, want the aligned minute %v and the live first-hit window %v", held[0].Window, held[1].Window, base, s.at(5*time.Second))
		}
	}
	for _, c := range []struct {
		name string
		r    floodgate.SettleRequest
		want error
	}{
		{"unknown", floodgate.SettleRequest{Requests: names, ID: "never-made", Actual: 2}, floodgate.ErrUnknownReservation},
		{"some keys", floodgate.SettleRequest{Requests: append(names[:2:2], floodgate.Request{Key: s.key(t, "other"), Limit: plain, Now: at}), ID: "h1", Actual: 2}, floodgate.ErrConflict},
	} {
		if _, err := hr.ReadHolds(t.Context(), c.r); !errors.Is(err, c.want) {
			t.Errorf("ReadHolds, %s: %v, want %v", c.name, err, c.want)
		}
	}
	if after := peek(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("remaining after ReadHolds %v, before %v: it changed the state", after, before)
	}
	if _, err := rv.Settle(t.Context(), commit); err != nil {
		t.Fatalf("commit after ReadHolds: %v", err)
	}
	if held, err := hr.ReadHolds(t.Context(), commit); err != nil || !held[0].Replayed || held[0].Units != 6 {
		t.Errorf("ReadHolds of the same commit after it: %+v, %v; want replayed", held, err)
	}
	for _, other := range []floodgate.SettleRequest{{Actual: 3}, {Cancel: true}} {
		other.Requests, other.ID = names, "h1"
		if _, err := hr.ReadHolds(t.Context(), other); !errors.Is(err, floodgate.ErrConflict) {
			t.Errorf("ReadHolds of %+v after a commit of 2: %v, want ErrConflict", other, err)
		}
	}
	if s.opts.ServerTime {
		return
	}
	ke := s.key(t, "expiring")
	s.hold(t, rv, "h2", time.Second, floodgate.Request{Key: ke, Limit: aligned, Cost: 1, Now: at})
	late := floodgate.SettleRequest{Requests: []floodgate.Request{{Key: ke, Limit: aligned, Now: at.Add(2 * time.Second)}}, ID: "h2", Actual: 1}
	if _, err := hr.ReadHolds(t.Context(), late); !errors.Is(err, floodgate.ErrExpired) {
		t.Errorf("ReadHolds after the expiry: %v, want ErrExpired", err)
	}
}
