package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/direct"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// storeOnly hides every method of the store but floodgate.Store's, so a
// Limiter over it decides by Store.Apply (the general path).
type storeOnly struct{ floodgate.Store }

// countingDirect is the store with its direct path, counting the calls
// of the direct path that decided.
type countingDirect struct {
	*memstore.Store
	decided *atomic.Int64
}

func (c countingDirect) DecideSmall(s direct.Small) (bool, int64, int64, int64, int64, int64, bool) {
	allowed, limit, remaining, resetAfter, retryAfter, now, ok := c.Store.DecideSmall(s)
	if ok {
		c.decided.Add(1)
	}
	return allowed, limit, remaining, resetAfter, retryAfter, now, ok
}

// diffLimits are the limits TestDirectDifferential draws from: every O(1)
// algorithm with and without its options, and limits the direct path
// does not take (the O(limit) algorithms, a calendar, a durable one,
// invalid ones), which must reach the general path in both.
func diffLimits(r *rand.Rand) floodgate.Limit {
	period := []time.Duration{time.Millisecond, 50 * time.Millisecond, time.Second}[r.IntN(3)]
	limit := []int64{0, 1, 3, 10, 1000}[r.IntN(5)]
	switch r.IntN(15) {
	case 0:
		return floodgate.Limit{Limit: limit, Period: period} // fixed_window by default
	case 1:
		return floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: limit, Period: period, Window: floodgate.FirstHit, CountRejected: r.IntN(2) == 0}
	case 2:
		return floodgate.Limit{Algorithm: floodgate.SlidingWindow, Limit: limit, Period: period, CountRejected: r.IntN(2) == 0}
	case 3:
		return floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: limit, Period: period, Burst: r.Int64N(5)}
	case 4, 5:
		return floodgate.Limit{Algorithm: floodgate.GCRA, Limit: limit, Period: period, Burst: r.Int64N(5), Name: "api"}
	case 6:
		return floodgate.Limit{Algorithm: floodgate.SlidingWindowLog, Limit: limit, Period: period}
	case 7:
		return floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: limit, Calendar: floodgate.Calendar{Unit: floodgate.CalendarDay}}
	case 8:
		return floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: limit, Period: period, Durable: true}
	case 9:
		return floodgate.Limit{Algorithm: floodgate.GCRA, Limit: -1, Period: period} // invalid: negative
	case 10:
		return floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: limit, Period: period + time.Nanosecond} // invalid: not whole µs
	case 11:
		return floodgate.Limit{Algorithm: "leaky", Limit: limit, Period: period} // invalid: unknown
	case 12:
		return floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: limit, Period: period, CountRejected: true, LocalBudget: 1}
	case 13:
		// invalid: a calendar without a unit, whose other fields are
		// not zero
		return floodgate.Limit{Algorithm: floodgate.GCRA, Limit: limit, Period: period, Calendar: floodgate.Calendar{Location: time.UTC}}
	}
	return floodgate.Limit{Algorithm: floodgate.GCRA, Limit: limit, Period: period}
}

// TestDirectDifferential runs the same random operations through two
// Limiters over two memory stores on one fake clock: one whose store has
// the direct path (internal/direct), one whose store is hidden behind
// floodgate.Store alone. Every answer (decision and error) and every
// state (a Peek after each step) must be the same, and the direct path
// must have decided most of them.
func TestDirectDifferential(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   memstore.Options
		lopts  floodgate.Options
		direct bool // whether the direct path decides at all
	}{
		{"plain", memstore.Options{}, floodgate.Options{}, true},
		{"prefix", memstore.Options{}, floodgate.Options{KeyPrefix: "p:"}, true},
		{"fail_open", memstore.Options{}, floodgate.Options{FailurePolicy: floodgate.FailOpen}, true},
		// A bounded store declines the direct path (its room check is
		// Apply's). The bound is far above the keys used: each store
		// spreads keys over shards by its own random seed, and the bound
		// is kept per shard, so the two would refuse different keys.
		{"max_keys", memstore.Options{MaxKeys: 1000}, floodgate.Options{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 20_000
			clock := floodgatetest.NewFakeClock(start)
			opts := tc.opts
			opts.Clock, opts.SweepInterval, opts.Shards = clock, -1, 4
			var decided atomic.Int64
			fastStore, generalStore := newStore(t, &opts), newStore(t, &opts)
			fast, err := floodgate.New(countingDirect{fastStore, &decided}, &tc.lopts)
			if err != nil {
				t.Fatal(err)
			}
			general, err := floodgate.New(storeOnly{generalStore}, &tc.lopts)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			keys := []string{"a", "b", "c", "d", "user:42", "", strings.Repeat("k", floodgate.MaxKeyLen+1)}
			limits := make([]floodgate.Limit, 24)
			for i := range limits {
				limits[i] = diffLimits(r)
			}
			canceled, cancel := context.WithCancel(context.Background())
			cancel()
			for i := range steps {
				key := keys[r.IntN(len(keys)-1)]
				if r.IntN(1000) == 0 {
					key = keys[len(keys)-1] // too long
				}
				limit := limits[r.IntN(len(limits))]
				ctx := context.Background()
				if r.IntN(20) == 0 {
					ctx = canceled
				}
				var op string
				var d1, d2 floodgate.Decision
				var err1, err2 error
				switch r.IntN(3) {
				case 0:
					op = "Allow"
					d1, err1 = fast.Allow(ctx, key, limit)
					d2, err2 = general.Allow(ctx, key, limit)
				default:
					n := []int64{-1, 0, 1, 1, 2, 3, 7, floodgate.MaxLimit + 1}[r.IntN(8)]
					op = fmt.Sprintf("AllowN(%d)", n)
					d1, err1 = fast.AllowN(ctx, key, limit, n)
					d2, err2 = general.AllowN(ctx, key, limit, n)
				}
				where := fmt.Sprintf("step %d: %s(%q, %v) at %v", i, op, key[:min(len(key), 10)], limit, clock.Now().Sub(start))
				if d1 != d2 {
					t.Fatalf("%s: direct %+v (%v), general %+v (%v)", where, d1, err1, d2, err2)
				}
				if fmt.Sprint(err1) != fmt.Sprint(err2) {
					t.Fatalf("%s: direct error %v, general %v", where, err1, err2)
				}
				p1, perr1 := fast.Peek(context.Background(), key, limit)
				p2, perr2 := general.Peek(context.Background(), key, limit)
				if p1 != p2 || fmt.Sprint(perr1) != fmt.Sprint(perr2) {
					t.Fatalf("%s: then Peek: direct %+v (%v), general %+v (%v)", where, p1, perr1, p2, perr2)
				}
				switch r.IntN(50) {
				case 0:
					clock.Advance(time.Duration(r.Int64N(int64(2 * time.Second))))
				case 1:
					// Both stores sweep at the same time, so expired keys
					// leave both alike.
					fastStore.Sweep()
					generalStore.Sweep()
				default:
					clock.Advance(time.Duration(r.Int64N(int64(300 * time.Microsecond))))
				}
			}
			if got := fastStore.Len(); got != generalStore.Len() {
				t.Errorf("keys held: direct %d, general %d", got, generalStore.Len())
			}
			n := decided.Load()
			t.Logf("%d of %d steps decided by the direct path", n, steps)
			if tc.direct && n < steps/4 {
				t.Errorf("the direct path decided %d of %d steps, want at least a quarter", n, steps)
			}
			if !tc.direct && n != 0 {
				t.Errorf("the direct path decided %d steps of a bounded store, want 0", n)
			}
		})
	}
}

// TestDirectPathNotTaken: a Limiter with its own Clock, an Observer or a
// Timeout-less fallback does not use the direct path (each needs the
// general path's Request), and decides as before.
func TestDirectPathNotTaken(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	for _, tc := range []struct {
		name string
		opts floodgate.Options
	}{
		{"clock", floodgate.Options{Clock: clock}},
		{"observer", floodgate.Options{Observer: observerFunc(func(floodgate.Event) {})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var decided atomic.Int64
			s := newStore(t, &memstore.Options{Clock: clock, SweepInterval: -1})
			l, err := floodgate.New(countingDirect{s, &decided}, &tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			limit := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 2, Period: time.Second}
			for i, want := range []bool{true, true, false} {
				d, err := l.Allow(context.Background(), "k", limit)
				if err != nil || d.Allowed != want {
					t.Fatalf("Allow %d: %+v, %v; want allowed %v", i, d, err, want)
				}
			}
			if n := decided.Load(); n != 0 {
				t.Errorf("direct path decided %d, want 0", n)
			}
		})
	}
}

type observerFunc func(floodgate.Event)

func (f observerFunc) Observe(e floodgate.Event) { f(e) }

// TestDirectConcurrent: goroutines taking one key by the direct path at
// once admit exactly the limit, no more (the shard's lock is taken as
// Apply takes it).
func TestDirectConcurrent(t *testing.T) {
	clock := floodgatetest.NewFakeClock(start)
	var decided atomic.Int64
	s := newStore(t, &memstore.Options{Clock: clock, SweepInterval: -1})
	l, err := floodgate.New(countingDirect{s, &decided}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each, limit = 8, 500, 1234
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			lim := floodgate.Limit{Algorithm: alg, Limit: limit, Period: time.Hour}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range each {
						d, err := l.Allow(context.Background(), "hot", lim)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							allowed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != limit {
				t.Errorf("%d allowed of %d, want exactly %d", got, goroutines*each, limit)
			}
		})
	}
	if n := decided.Load(); n != 4*goroutines*each {
		t.Errorf("direct path decided %d, want %d", n, 4*goroutines*each)
	}
}
