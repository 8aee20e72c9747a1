package floodgatetest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// A store's package runs the suite from a test: once with the time in every
// request, and once letting the store read its own clock, here a FakeClock.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
			s := memstore.New(nil)
			t.Cleanup(func() { s.Close() })
			return s
		})
	}
	testConformanceServerTime := func(t *testing.T) {
		clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
			s := memstore.New(&memstore.Options{Clock: clock})
			t.Cleanup(func() { s.Close() })
			return s
		}, floodgatetest.Options{ServerTime: true})
	}
	// In a _test.go file these are func TestConformance(t *testing.T) and
	// func TestConformanceServerTime(t *testing.T).
	_, _ = testConformance, testConformanceServerTime
}

// A FakeClock moves only when told, so a store that reads it decides
// exactly as a test expects.
func ExampleFakeClock() {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer store.Close()
	limiter, _ := floodgate.New(store, nil)
	perSecond := floodgate.Limit{Limit: 2, Period: time.Second}
	ctx := context.Background()
	for range 3 {
		d, _ := limiter.Allow(ctx, "user:42", perSecond)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(time.Second)
	d, _ := limiter.Allow(ctx, "user:42", perSecond)
	fmt.Println(d.Allowed, d.Remaining, d.Now.UTC().Format(time.TimeOnly))
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1s
	// true 1 12:00:01
}
