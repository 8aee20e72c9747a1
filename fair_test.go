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

// TestFairShares: two tenants under one shared fixed window of 100 per
// minute, on three instances over a real Redis and over memory, on one
// injected clock stepped a thousandth of the window (60 ms) at a time. The
// busy tenant asks every step (1,000 a window), the quiet one every 50
// steps (20 a window), each call on the next instance in turn, for 5
// windows; then the quiet one stops and the busy one goes on for 5 more.
// (A minute, not a second: Redis expires a flow's key in its own real
// time, at least a second after the window's end of the injected clock;
// on a loaded machine 50 steps of the test can take longer than a second
// of real time, and the quiet flow's key would go before its window did.)
//
// Asserted: no window admits more than 100; from the second window on
// (when the previous window's demand is known) the quiet tenant gets
// exactly its 20 and the busy one exactly the other 80 in every window; in
// the first window the quiet one stops asking, its demand of the window
// before still holds its 20 (the busy one gets 80), and from the next
// window on the busy tenant borrows the whole 100.
func TestFairShares(t *testing.T) {
	limit := floodgate.Limit{Limit: 100, Period: time.Minute}
	const step = time.Minute / 1000
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			clock := floodgatetest.NewFakeClock(start)
			ls := fleet(t, storeName, clock, nil)
			const windows = 10
			var busy, quiet, total [windows]int
			// maxSpan is the most units admitted in any span of one window
			// (the trailing window at each step).
			var admittedAt []time.Duration
			maxSpan := 0
			call := 0
			ask := func(flow string, ms int) bool {
				t.Helper()
				d, err := ls[call%3].AllowFlow(t.Context(), "upstream", flow, limit, 1)
				call++
				if err != nil {
					t.Fatalf("%s at step %d: %v", flow, ms, err)
				}
				if d.Allowed {
					at := time.Duration(ms) * step
					admittedAt = append(admittedAt, at)
					n := 0
					for i := len(admittedAt) - 1; i >= 0 && admittedAt[i] > at-limit.Period; i-- {
						n++
					}
					maxSpan = max(maxSpan, n)
				}
				return d.Allowed
			}
			for ms := range windows * 1000 {
				w := ms / 1000
				if ms%50 == 0 && w < 5 && ask("quiet", ms) {
					quiet[w]++
					total[w]++
				}
				if ask("busy", ms) {
					busy[w]++
					total[w]++
				}
				clock.Advance(step)
			}
			t.Logf("per window: quiet %v, busy %v, total %v; most in any trailing window %d", quiet, busy, total, maxSpan)
			for w := range windows {
				if total[w] > 100 {
					t.Errorf("window %d admitted %d, above the limit 100", w, total[w])
				}
				wantQuiet, wantBusy := 20, 80
				switch {
				case w == 0:
					continue // no demand known yet: measured, not asserted
				case w == 5:
					wantQuiet = 0 // idle, its share still held for one window
				case w > 5:
					wantQuiet, wantBusy = 0, 100
				}
				if quiet[w] != wantQuiet || busy[w] != wantBusy {
					t.Errorf("window %d: quiet %d, busy %d; want %d and %d", w, quiet[w], busy[w], wantQuiet, wantBusy)
				}
			}
			// A fixed window admits its limit in each window, so a span of
			// one window across a boundary may hold up to two windows' units.
			if maxSpan > 200 {
				t.Errorf("%d admitted in one window's span", maxSpan)
			}
		})
	}
}

// TestFairFlowsInvalid: what AllowFlow refuses, naming the field.
func TestFairFlowsInvalid(t *testing.T) {
	m := memstore.New(nil)
	defer m.Close()
	l, err := floodgate.New(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	month, err := floodgate.ParseCalendar("month", "America/New_York", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		flow  string
		limit floodgate.Limit
		field string
	}{
		{"calendar", "a", floodgate.Limit{Limit: 10, Calendar: month}, "calendar"},
		{"empty flow", "", floodgate.Limit{Limit: 10, Period: time.Second}, "flow"},
		{"gcra", "a", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}, "algorithm"},
		{"first hit", "a", floodgate.Limit{Limit: 10, Period: time.Second, Window: floodgate.FirstHit}, "window"},
		{"count rejected", "a", floodgate.Limit{Limit: 10, Period: time.Second, CountRejected: true}, "count_rejected"},
		{"period", "a", floodgate.Limit{Limit: 10, Period: floodgate.MaxPeriod}, "period"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := l.AllowFlow(t.Context(), "k", c.flow, c.limit, 1)
			var fe *floodgate.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err = %v, want a FieldError naming %s", err, c.field)
			}
			if d.Allowed {
				t.Error("allowed")
			}
		})
	}
	// A long flow is named by its hash, the same on every call.
	long := string(make([]byte, floodgate.MaxFlowLen+1))
	if got := floodgate.FlowName(long); len(got) != 44 || got != floodgate.FlowName(long) || got[0] != '#' {
		t.Errorf("FlowName of %d bytes = %q", len(long), got)
	}
	if _, err := l.AllowFlow(t.Context(), "k", long, floodgate.Limit{Limit: 10, Period: time.Second}, 1); err != nil {
		t.Error(err)
	}
}

func ExampleLimiter_AllowFlow() {
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(&memstore.Options{Clock: clock})
	defer store.Close()
	limiter, _ := floodgate.New(store, nil)
	ctx := context.Background()
	// 100 per second for an upstream, shared by its tenants.
	limit := floodgate.Limit{Limit: 100, Period: time.Second}
	for range 2 {
		var busy, quiet int
		for ms := range 1000 {
			if ms%50 == 0 { // 20 per second
				if d, _ := limiter.AllowFlow(ctx, "upstream", "quiet", limit, 1); d.Allowed {
					quiet++
				}
			}
			if d, _ := limiter.AllowFlow(ctx, "upstream", "busy", limit, 1); d.Allowed { // 1,000 per second
				busy++
			}
			clock.Advance(time.Millisecond)
		}
		// The first second knows no demand yet; from the second on,
		// the split follows the demand of the second before.
		fmt.Println("quiet", quiet, "busy", busy)
	}
	// Output:
	// quiet 2 busy 98
	// quiet 20 busy 80
}
