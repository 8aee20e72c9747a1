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

// waitLimit is the issue's limit: 10 per second, one at a time, so the
// slots are 100 ms apart.
var waitLimit = floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 1}

// TestWaitFleet is issue 29's test of waiting: three instances over one
// real Redis (and, for comparison, over one memory store), on one
// injected clock. 100 callers arrive 10 ms apart, round robin over the
// instances, each waiting at most 6 s for a slot of one unit at 10 per
// second. It asserts: every admitted slot is within its caller's maxWait;
// the slots are in arrival order, exactly 100 ms apart (10 per second,
// no window of a second holds more than 10 + 1); the callers whose slot
// would be later than 6 s are refused, with a RetryAfter; the last 7
// admitted callers cancel (a retry of each cancel is replayed), each
// giving back exactly one unit, and the next 7 callers take exactly
// those slots.
//
// It runs for GCRA and for the token bucket of the same rate and burst,
// whose waiting callers put the bucket into debt: the two must hand out
// the same slots.
func TestWaitFleet(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket} {
		lim := waitLimit
		lim.Algorithm = alg
		for _, name := range []string{"memory", "redis"} {
			t.Run(string(alg)+"/"+name, func(t *testing.T) {
				clock := floodgatetest.NewFakeClock(start)
				ls := fleet(t, name, clock, &floodgate.Options{KeyPrefix: "wait:"})
				checkWaitFleet(t, clock, ls, lim)
			})
		}
	}
}

func checkWaitFleet(t *testing.T, clock *floodgatetest.FakeClock, ls []*floodgate.Limiter, waitLimit floodgate.Limit) {
	ctx := t.Context()
	const (
		callers = 100
		gap     = 10 * time.Millisecond
		maxWait = 6 * time.Second
		slot    = 100 * time.Millisecond
	)
	type got struct {
		arrival time.Time
		s       *floodgate.Slot
		d       floodgate.Decision
	}
	var admitted, refused []got
	for i := range callers {
		clock.Set(start.Add(time.Duration(i) * gap))
		s, d, err := ls[i%len(ls)].Schedule(ctx, "llm", waitLimit, 1, maxWait, nil)
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		g := got{arrival: clock.Now(), s: s, d: d}
		if d.Allowed {
			admitted = append(admitted, g)
		} else {
			refused = append(refused, g)
		}
	}
	// The model: the next free slot starts at 0 and moves 100 ms per
	// admission; a caller is admitted when it is within 6 s of its
	// arrival (a refusal takes nothing, so a later caller may fit again).
	want := 0
	for i, next := 0, time.Duration(0); i < callers; i++ {
		if next-time.Duration(i)*gap <= maxWait {
			want++
			next += slot
		}
	}
	if got := len(admitted); got != want {
		t.Fatalf("admitted %d of %d callers, want %d", got, callers, want)
	}
	for i, g := range admitted {
		if g.s.At.Sub(g.arrival) > maxWait {
			t.Errorf("caller %d: slot at %v, %v after its arrival, beyond maxWait %v", i, g.s.At.Sub(start), g.s.At.Sub(g.arrival), maxWait)
		}
		want := start.Add(time.Duration(i) * slot)
		if d := g.s.At.Sub(want); d < 0 || d > 2*time.Microsecond {
			t.Errorf("admitted caller %d: slot at %v, want %v (arrival order, 10 per second)", i, g.s.At.Sub(start), want.Sub(start))
		}
	}
	for _, g := range refused {
		if g.d.RetryAfter <= 0 {
			t.Errorf("refused caller at %v: RetryAfter %v, want > 0", g.arrival.Sub(start), g.d.RetryAfter)
		}
	}
	// At most 10 + 1 slots in any second.
	for i := range admitted {
		n := 0
		for _, g := range admitted[i:] {
			if g.s.At.Sub(admitted[i].s.At) < time.Second {
				n++
			}
		}
		if n > 11 {
			t.Errorf("%d slots in the second from %v", n, admitted[i].s.At.Sub(start))
		}
	}
	t.Logf("%d callers: %d admitted at 100 ms apart (last at %v), %d refused", callers, len(admitted), admitted[len(admitted)-1].s.At.Sub(start), len(refused))

	// The last 7 cancel, tail first, before their slots: each gives back
	// exactly one unit, once.
	const cancelled = 7
	clock.Set(start.Add(2 * time.Second))
	for i := len(admitted) - 1; i >= len(admitted)-cancelled; i-- {
		st, err := admitted[i].s.Cancel(ctx)
		if err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
		if st[0].Refunded != 1 {
			t.Fatalf("cancel %d gave back %d units, want 1", i, st[0].Refunded)
		}
		again, err := admitted[i].s.Cancel(ctx)
		if err != nil || !again[0].Replayed || again[0].Refunded != 1 {
			t.Fatalf("cancel %d again: %+v, %v; want the first answer, replayed", i, again, err)
		}
	}
	// The next 7 callers take exactly the slots given back.
	for k := range cancelled {
		s, d, err := ls[k%len(ls)].Schedule(ctx, "llm", waitLimit, 1, maxWait, nil)
		if err != nil || !d.Allowed {
			t.Fatalf("caller after the cancels %d: %+v, %v", k, d, err)
		}
		if want := admitted[len(admitted)-cancelled+k].s.At; s.At.Sub(want) < 0 || s.At.Sub(want) > 2*time.Microsecond {
			t.Errorf("caller after the cancels %d: slot at %v, want the given-back %v", k, s.At.Sub(start), want.Sub(start))
		}
	}
	// And the one after them queues behind the last slot, 100 ms later:
	// no slot was counted twice.
	last := admitted[len(admitted)-1].s.At
	if s, d, err := ls[0].Schedule(ctx, "llm", waitLimit, 1, maxWait, nil); err != nil || !d.Allowed || s.At.Sub(last) < slot || s.At.Sub(last) > slot+2*time.Microsecond {
		t.Errorf("one more caller: %+v, %v; want a slot 100 ms after %v", d, err, last.Sub(start))
	}
}

// TestWaitCancelled checks that WaitN sleeps until its slot and gives the
// slot back when its context ends first: a real sleep of at most 100 ms,
// asserted by what the store holds, not by time.
func TestWaitCancelled(t *testing.T) {
	t.Parallel()
	m := memstore.New(nil)
	t.Cleanup(func() { m.Close() })
	l, err := floodgate.New(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lim := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 1}
	if d, err := l.Wait(ctx, "k", lim, time.Second); err != nil || !d.Allowed {
		t.Fatalf("first wait: %+v, %v", d, err)
	}
	// The second would wait about 100 ms; its context ends first.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	d, err := l.Wait(cctx, "k", lim, time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %+v, %v; want context.Canceled", d, err)
	}
	// Its slot was given back: the next caller gets the same one, about
	// 100 ms ahead, not 200 ms.
	s, d, err := l.Schedule(ctx, "k", lim, 1, time.Second, nil)
	if err != nil || !d.Allowed {
		t.Fatalf("schedule: %+v, %v", d, err)
	}
	if s.Delay > 100*time.Millisecond+2*time.Microsecond {
		t.Errorf("delay %v after a cancelled wait, want at most 100 ms: the slot was not given back", s.Delay)
	}
	if _, err := s.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestWaitInvalid(t *testing.T) {
	t.Parallel()
	m := memstore.New(nil)
	t.Cleanup(func() { m.Close() })
	l, _ := floodgate.New(m, nil)
	for _, tc := range []struct {
		name    string
		limit   floodgate.Limit
		n       int64
		maxWait time.Duration
		want    error
	}{
		{"fixed window", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 10, Period: time.Second}, 1, time.Second, floodgate.ErrInvalidLimit},
		{"sliding window", floodgate.Limit{Algorithm: floodgate.SlidingWindow, Limit: 10, Period: time.Second}, 1, time.Second, floodgate.ErrInvalidLimit},
		{"concurrency", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 10, Period: time.Second}, 1, time.Second, floodgate.ErrInvalidLimit},
		{"token bucket, cost above burst", floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Second, Burst: 2}, 3, time.Second, floodgate.ErrInvalidRequest},
		{"negative wait", waitLimit, 1, -time.Second, floodgate.ErrInvalidRequest},
		{"wait too long", waitLimit, 1, 2 * time.Hour, floodgate.ErrInvalidRequest},
		{"cost above burst", waitLimit, 2, time.Second, floodgate.ErrInvalidRequest},
		{"cost 0", waitLimit, 0, time.Second, floodgate.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := l.Schedule(t.Context(), "k", tc.limit, tc.n, tc.maxWait, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
}

func ExampleLimiter_WaitN() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, nil)
	// 10 per second, one at a time: a caller waits up to 2 s for its turn.
	limit := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 1}
	d, err := limiter.WaitN(context.Background(), "crawler", limit, 1, 2*time.Second)
	fmt.Println(d.Allowed, err)
	// Output: true <nil>
}

// TestWaitCancelMiddle measures what a cancel from the middle of the
// queue does to the rate, for GCRA and the token bucket, on three
// Limiters over one real Redis and over memory, on an injected clock: 40
// callers take the slots 0 s, 0.1 s ... 3.9 s (10 per second, burst 1);
// at 0.5 s the callers of the slots 2.0, 2.1 and 2.2 s cancel, each
// giving back exactly one unit; three more callers then take the slots
// 3.7, 3.8 and 3.9 s, which three callers already hold. The used slots
// number exactly 40 (40 - 3 + 3), but the closed second [2.9 s, 3.9 s]
// holds 14 of them: limit + burst + the 3 units given back, the worst
// case docs/waiting.md states. Cancels from the tail (the same three
// counts at the end of the queue) keep the worst second at limit + burst,
// 11.
func TestWaitCancelMiddle(t *testing.T) {
	for _, alg := range []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket} {
		lim := waitLimit
		lim.Algorithm = alg
		for _, name := range []string{"memory", "redis"} {
			for _, from := range []string{"middle", "tail"} {
				t.Run(string(alg)+"/"+name+"/"+from, func(t *testing.T) {
					clock := floodgatetest.NewFakeClock(start)
					ls := fleet(t, name, clock, &floodgate.Options{KeyPrefix: "waitmid:"})
					worst, used := cancelAndRefill(t, clock, ls, lim, from == "middle")
					want := lim.Limit + lim.Burst // 11: the rate's own bound
					if from == "middle" {
						want += 3
					}
					if used != 40 || worst != want {
						t.Errorf("cancels from the %s: %d slots used, at most %d in a second; want 40 and %d", from, used, worst, want)
					}
					t.Logf("cancels from the %s: %d slots used, at most %d in a closed second (limit %d + burst %d + %d given back)", from, used, worst, lim.Limit, lim.Burst, worst-lim.Limit-lim.Burst)
				})
			}
		}
	}
}

// cancelAndRefill runs TestWaitCancelMiddle's queue on ls: it returns the
// most slots in use in any closed window of the limit's period, and how
// many are in use.
func cancelAndRefill(t *testing.T, clock *floodgatetest.FakeClock, ls []*floodgate.Limiter, lim floodgate.Limit, middle bool) (worst int64, used int) {
	ctx := t.Context()
	const maxWait = 6 * time.Second
	var slots []*floodgate.Slot
	for i := range 40 {
		clock.Set(start.Add(time.Duration(i) * 10 * time.Millisecond))
		s, d, err := ls[i%len(ls)].Schedule(ctx, "q", lim, 1, maxWait, nil)
		if err != nil || !d.Allowed {
			t.Fatalf("caller %d: %+v, %v", i, d, err)
		}
		if want := start.Add(time.Duration(i) * 100 * time.Millisecond); s.At.Sub(want) < 0 || s.At.Sub(want) > 2*time.Microsecond {
			t.Fatalf("caller %d: slot at %v, want %v", i, s.At.Sub(start), want.Sub(start))
		}
		slots = append(slots, s)
	}
	clock.Set(start.Add(500 * time.Millisecond))
	first := 37 // the tail: 3.7, 3.8 and 3.9 s
	if middle {
		first = 20 // 2.0, 2.1 and 2.2 s
	}
	// Tail first when from the tail, as callers who wait longest give up
	// first; in order from the middle.
	order := []int{first, first + 1, first + 2}
	if !middle {
		order = []int{first + 2, first + 1, first}
	}
	for _, i := range order {
		st, err := slots[i].Cancel(ctx)
		if err != nil || st[0].Refunded != 1 {
			t.Fatalf("cancel of slot %d: %+v, %v; want 1 unit back", i, st, err)
		}
	}
	var at []time.Time
	for i, s := range slots {
		if i < first || i > first+2 {
			at = append(at, s.At)
		}
	}
	for k := range 3 {
		s, d, err := ls[k].Schedule(ctx, "q", lim, 1, maxWait, nil)
		if err != nil || !d.Allowed {
			t.Fatalf("caller %d after the cancels: %+v, %v", k, d, err)
		}
		at = append(at, s.At)
	}
	for _, a := range at {
		var n int64
		for _, b := range at {
			if !b.Before(a) && b.Sub(a) <= lim.Period {
				n++
			}
		}
		worst = max(worst, n)
	}
	return worst, len(at)
}

func ExampleLimiter_Schedule_tokenBucket() {
	store := memstore.New(nil)
	defer store.Close()
	// A fixed clock, so the delays print the same on every run.
	clock := floodgatetest.NewFakeClock(time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC))
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: clock})
	ctx := context.Background()
	// A bucket of 2 that refills 10 per second: callers that find it
	// empty wait up to 250 ms for their token.
	limit := floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Period: time.Second, Burst: 2}
	var slots []*floodgate.Slot
	for i := range 5 {
		s, d, err := limiter.Schedule(ctx, "webhooks", limit, 1, 250*time.Millisecond, nil)
		switch {
		case err != nil:
			fmt.Println(err)
		case !d.Allowed:
			fmt.Printf("caller %d: no slot within 250 ms, retry in %v\n", i, d.RetryAfter)
		default:
			fmt.Printf("caller %d: go in %v\n", i, s.Delay)
			slots = append(slots, s)
		}
	}
	// The caller of the last slot gives it back: the next one takes it.
	st, _ := slots[3].Cancel(ctx)
	s, _, _ := limiter.Schedule(ctx, "webhooks", limit, 1, 250*time.Millisecond, nil)
	fmt.Printf("cancelled: %d back; the next caller goes in %v\n", st[0].Refunded, s.Delay)
	// Output:
	// caller 0: go in 0s
	// caller 1: go in 0s
	// caller 2: go in 100ms
	// caller 3: go in 200ms
	// caller 4: no slot within 250 ms, retry in 100ms
	// cancelled: 1 back; the next caller goes in 200ms
}
