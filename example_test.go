package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// The clock of these examples, so their output does not depend on the time
// they run: the start of a calendar minute.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func Example() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})

	perMinute := floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 3, Period: time.Minute}
	for range 4 {
		d, err := limiter.Allow(context.Background(), "user:42", perMinute)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry_after=0s
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=1m0s
}

func ExampleLimiter_AllowN() {
	clock := floodgatetest.NewFakeClock(start)
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: clock})
	// 10 per second, at most 5 at once: one token every 100ms.
	bucket := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 5}

	d, _ := limiter.AllowN(context.Background(), "upload:7", bucket, 4)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(context.Background(), "upload:7", bucket, 3)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	clock.Advance(200 * time.Millisecond)
	d, _ = limiter.AllowN(context.Background(), "upload:7", bucket, 3)
	fmt.Println(d.Allowed, d.Remaining)
	d, _ = limiter.AllowN(context.Background(), "upload:7", bucket, 6)
	fmt.Println(d.Allowed, d.RetryAfter == floodgate.Never)
	// Output:
	// true 1
	// false 1 200ms
	// true 0
	// false true
}

func ExampleLimiter_Peek() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	limit := floodgate.Limit{Algorithm: floodgate.SlidingWindowLog, Limit: 10, Period: time.Hour}

	limiter.AllowN(context.Background(), "report:1", limit, 3)
	d, _ := limiter.Peek(context.Background(), "report:1", limit)
	fmt.Println(d.Remaining, d.ResetAfter)
	// Output: 7 1h0m0s
}

func ExampleLimiter_Reset() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	limit := floodgate.Limit{Limit: 1, Period: time.Hour}

	limiter.Allow(context.Background(), "login:alice", limit)
	d, _ := limiter.Allow(context.Background(), "login:alice", limit)
	fmt.Println(d.Allowed)
	limiter.Reset(context.Background(), "login:alice", limit)
	d, _ = limiter.Allow(context.Background(), "login:alice", limit)
	fmt.Println(d.Allowed)
	// Output:
	// false
	// true
}

func ExampleLimiter_AllowEach() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	perSecond := floodgate.Limit{Limit: 10, Period: time.Second}
	perHour := floodgate.Limit{Limit: 2, Period: time.Hour}

	for range 3 {
		d, each, _ := limiter.AllowEach(context.Background(), "api:key1", 1, perSecond, perHour)
		fmt.Println(d.Allowed, each[0].Remaining, each[1].Remaining)
	}
	// The third request is denied by the hourly limit and takes nothing
	// from the per-second one.

	// Output:
	// true 9 1
	// true 8 0
	// false 8 0
}

func ExampleLimiter_Acquire() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	// At most 2 exports at once per user; a lease expires after 5 minutes if
	// its holder dies without releasing it.
	twoAtOnce := floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 2, Period: 5 * time.Minute}
	ctx := context.Background()

	a, _, _ := limiter.Acquire(ctx, "export:bob", twoAtOnce)
	b, _, _ := limiter.Acquire(ctx, "export:bob", twoAtOnce)
	c, d, _ := limiter.Acquire(ctx, "export:bob", twoAtOnce)
	fmt.Println(a != nil, b != nil, c != nil, d.RetryAfter)
	a.Release(ctx)
	c, _, _ = limiter.Acquire(ctx, "export:bob", twoAtOnce)
	fmt.Println(c != nil)
	// Output:
	// true true false 5m0s
	// true
}

func ExampleLimit_Validate() {
	bad := floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: -1, Burst: 5}
	err := bad.Validate()
	fmt.Println(errors.Is(err, floodgate.ErrInvalidLimit))
	fmt.Println(err)
	// Output:
	// true
	// floodgate: invalid limit: limit: -1 is negative
	// floodgate: invalid limit: period: 0s must be above zero
	// floodgate: invalid limit: burst: fixed_window takes no burst (only token_bucket and gcra do)
}

// An edge that names fields its own way (a JSON body, a form) maps each
// FieldError's Field instead of parsing the message.
func ExampleFieldError() {
	bad := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: -1, Window: "rolling"}
	err := bad.Validate()
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		if fe, ok := errors.AsType[*floodgate.FieldError](e); ok {
			fmt.Printf("%s: %s\n", fe.Field, fe.Problem)
		}
	}
	if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
		fmt.Println("first:", fe.Field)
	}
	// Output:
	// burst: -1 is negative
	// window: unknown window "rolling" (want aligned or first_hit)
	// first: burst
}

func ExampleLimit_String() {
	fmt.Println(floodgate.Limit{Limit: 60, Period: time.Minute})
	fmt.Println(floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20})
	// Output:
	// 60/1m0s fixed_window
	// 10/1s gcra burst=20
}

// A Limiter answers a store failure, an error wrapping ErrStore, with its
// FailurePolicy: here the store is always down, and FailOpen lets
// requests through while reporting the error.
func ExampleFailurePolicy() {
	limiter, _ := floodgate.New(downStore{}, &floodgate.Options{FailurePolicy: floodgate.FailOpen})
	d, err := limiter.Allow(context.Background(), "user:1", floodgate.Limit{Limit: 1, Period: time.Second})
	fmt.Println(d.Allowed, err)
	// Output: true floodgate: store unavailable: connection refused
}

// downStore is a store that cannot reach its server: its error wraps
// floodgate.ErrStore, as every store's transport errors do.
type downStore struct{}

func (downStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
}

// With FailLocal, a Limiter that cannot reach its shared store decides in
// a memory store with its share of the limit: here one of 3 instances
// holds 2 of "6 per minute". A local decision is a real one, so it comes
// without an error; Decision.Fallback says where it came from, and the
// Observer sees the store's error.
func ExampleFailurePolicy_local() {
	local := memstore.New(nil)
	defer local.Close()
	limiter, err := floodgate.New(downStore{}, &floodgate.Options{
		Clock:         floodgatetest.NewFakeClock(start),
		FailurePolicy: floodgate.FailLocal,
		Local:         local,
		Instances:     3,
		Timeout:       5 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	perMinute := floodgate.Limit{Limit: 6, Period: time.Minute}
	for range 3 {
		d, err := limiter.Allow(context.Background(), "user:42", perMinute)
		fmt.Printf("allowed=%v limit=%d remaining=%d fallback=%v err=%v\n", d.Allowed, d.Limit, d.Remaining, d.Fallback, err)
	}
	// Output:
	// allowed=true limit=2 remaining=1 fallback=true err=<nil>
	// allowed=true limit=2 remaining=0 fallback=true err=<nil>
	// allowed=false limit=2 remaining=0 fallback=true err=<nil>
}

// Decide checks several keys at once, each against its own limit and
// answered by its own failure policy when the store fails: here a
// per-user limit, and a per-tenant limit that should rather fail open.
func ExampleLimiter_Decide() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	outs, err := limiter.Decide(context.Background(), []floodgate.Item{
		{Key: "user:42", Limit: floodgate.Limit{Limit: 1, Period: time.Minute}, Cost: 1},
		{Key: "tenant:7", Limit: floodgate.Limit{Limit: 100, Period: time.Minute}, Cost: 1, Policy: floodgate.FailOpen},
	})
	if err != nil {
		panic(err)
	}
	for _, o := range outs {
		fmt.Printf("allowed=%v remaining=%d policy=%q\n", o.Decision.Allowed, o.Decision.Remaining, o.Policy)
	}
	// Output:
	// allowed=true remaining=0 policy=""
	// allowed=true remaining=99 policy=""
}

// Items of several classes on one key: a bulk export is sheddable, so it
// stops with 20% of the budget left, which a critical health check may
// still take.
func ExampleLimiter_Decide_priority() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	limit := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}
	ask := func(p floodgate.Priority, cost int64) {
		outs, err := limiter.Decide(context.Background(), []floodgate.Item{{Key: "upstream", Limit: limit, Cost: cost, Priority: p}})
		if err != nil {
			panic(err)
		}
		d := outs[0].Decision
		fmt.Printf("%s cost %d: allowed=%v limit=%d remaining=%d\n", p, cost, d.Allowed, d.Limit, d.Remaining)
	}
	ask(floodgate.Sheddable, 8)
	ask(floodgate.Sheddable, 1)
	ask(floodgate.Critical, 2)
	// Output:
	// sheddable cost 8: allowed=true limit=8 remaining=0
	// sheddable cost 1: allowed=false limit=8 remaining=0
	// critical cost 2: allowed=true limit=10 remaining=0
}

// An LLM token budget per tenant: reserve max_tokens before the call, then
// commit the tokens the call actually used, and the rest goes back to the
// tenant's budget. A retry of the commit (after a timeout, say) gets the
// first answer and gives nothing back twice.
func ExampleLimiter_Reserve() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	budget := floodgate.Limit{Limit: 10_000, Period: time.Hour} // tokens per tenant per hour

	const maxTokens = 4_000
	res, d, err := limiter.Reserve(context.Background(), "tenant:acme", budget, maxTokens, &floodgate.ReserveOptions{TTL: 2 * time.Minute})
	if err != nil || !d.Allowed {
		fmt.Println("over budget, retry after", d.RetryAfter)
		return
	}
	fmt.Println("reserved, remaining", d.Remaining)

	used := int64(1_250) // from the model's answer
	st, _ := res.Commit(context.Background(), used)
	fmt.Println("given back", st[0].Refunded, "remaining", st[0].Decision.Remaining)

	st, _ = res.Commit(context.Background(), used) // a retry
	fmt.Println("replayed", st[0].Replayed, "remaining", st[0].Decision.Remaining)
	// Output:
	// reserved, remaining 6000
	// given back 2750 remaining 8750
	// replayed true remaining 8750
}

// A monthly quota that resets at midnight on the 15th in New York: the
// window that holds 10 March 2026 began on 15 February and lasts an hour
// less than 28 days, since the clocks skip an hour on 8 March.
func ExampleCalendar() {
	c, err := floodgate.ParseCalendar("month", "America/New_York", "15")
	if err != nil {
		fmt.Println(err)
		return
	}
	limit := floodgate.Limit{Limit: 10_000, Calendar: c, Durable: true}
	start, end := limit.Calendar.Window(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	fmt.Println(limit.Validate() == nil)
	fmt.Println(start.Format(time.RFC3339), end.Format(time.RFC3339), end.Sub(start))
	// Output:
	// true
	// 2026-02-15T00:00:00-05:00 2026-03-15T00:00:00-04:00 671h0m0s
}

// Reserves of one's own instead of the default 5% and 20%: sheddable
// batch traffic stops with half of the budget left, normal traffic with
// 2 units, and critical traffic may take all of it.
func ExampleReserves() {
	store := memstore.New(nil)
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	limit := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}
	reserves := &floodgate.Reserves{
		Normal:    floodgate.ClassReserve{Units: 2},
		Sheddable: floodgate.ClassReserve{Percent: 50},
	}
	ask := func(p floodgate.Priority, cost int64) {
		outs, err := limiter.Decide(context.Background(), []floodgate.Item{{Key: "upstream", Limit: limit, Cost: cost, Priority: p, Reserves: reserves}})
		if err != nil {
			panic(err)
		}
		d := outs[0].Decision
		fmt.Printf("%s cost %d: allowed=%v limit=%d remaining=%d\n", p, cost, d.Allowed, d.Limit, d.Remaining)
	}
	ask(floodgate.Sheddable, 5)
	ask(floodgate.Sheddable, 1)
	ask(floodgate.Normal, 3)
	ask(floodgate.Normal, 1)
	ask(floodgate.Critical, 2)
	// Output:
	// sheddable cost 5: allowed=true limit=5 remaining=0
	// sheddable cost 1: allowed=false limit=5 remaining=0
	// normal cost 3: allowed=true limit=8 remaining=0
	// normal cost 1: allowed=false limit=8 remaining=0
	// critical cost 2: allowed=true limit=10 remaining=0
}
