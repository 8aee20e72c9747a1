package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// openExample opens a ledger in a new temporary directory; the returned
// func closes it and removes the directory.
func openExample(ctx context.Context) (*sqlite.Ledger, func()) {
	dir, err := os.MkdirTemp("", "ledger-example-")
	if err != nil {
		panic(err)
	}
	l, err := sqlite.Open(ctx, filepath.Join(dir, "ledger.db"), nil)
	if err != nil {
		panic(err)
	}
	return l, func() { l.Close(); os.RemoveAll(dir) }
}

// A commit of a paid quota is recorded once, however often it is retried,
// and the window's usage is the sum of its commits.
func Example() {
	ctx := context.Background()
	l, done := openExample(ctx)
	defer done()

	monthly := floodgate.Limit{Limit: 10_000, Period: 30 * 24 * time.Hour}
	at := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	commit := ledger.Entry{
		Key:    "tenant:acme",
		Limit:  monthly,
		Window: ledger.WindowAt(monthly.Period, at).Start,
		Units:  1234,
		ID:     "res-7f3a", // the reservation's ID
		At:     at,
	}
	for range 3 { // a commit retried after timeouts
		written, err := l.Record(ctx, []ledger.Entry{commit})
		fmt.Println("written:", written, err)
	}
	u, err := l.Usage(ctx, "tenant:acme", monthly.Period, at.Add(time.Hour))
	fmt.Println(u.Units, "units in", u.Window, err)
	// Output:
	// written: [true] <nil>
	// written: [false] <nil>
	// written: [false] <nil>
	// 1234 units in [2026-01-07T00:00:00Z, 2026-02-06T00:00:00Z) <nil>
}

// A billing report: the usage per key and window, as CSV.
func ExampleWriteReport() {
	ctx := context.Background()
	l, done := openExample(ctx)
	defer done()

	daily := floodgate.Limit{Limit: 1000, Period: 24 * time.Hour}
	day := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	_, err := l.Record(ctx, []ledger.Entry{
		{Key: "tenant:acme", Limit: daily, Window: day, Units: 700, ID: "r1", At: day.Add(9 * time.Hour)},
		{Key: "tenant:acme", Limit: daily, Window: day, Units: 50, ID: "r2", At: day.Add(17 * time.Hour)},
		{Key: "tenant:globex", Limit: daily, Window: day, Units: 20, ID: "r1", At: day.Add(10 * time.Hour)},
	})
	if err != nil {
		panic(err)
	}
	q := ledger.Query{From: day, To: day.Add(24 * time.Hour), KeyPrefix: "tenant:"}
	if err := ledger.WriteReport(ctx, os.Stdout, l, q, ledger.CSV); err != nil {
		panic(err)
	}
	// Output:
	// key,algorithm,limit,period,period_us,alignment,window_start,window_end,units,entries,first_at,last_at
	// tenant:acme,fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,750,2,2026-01-05T09:00:00Z,2026-01-05T17:00:00Z
	// tenant:globex,fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,20,1,2026-01-05T10:00:00Z,2026-01-05T10:00:00Z
}

// After a restart the store has lost a counter: Reconcile finds the
// drift, and Raise puts the lost units back, so the quota does not admit
// them again.
func ExampleReconcile() {
	ctx := context.Background()
	l, done := openExample(ctx)
	defer done()

	hourly := floodgate.Limit{Limit: 100, Period: time.Hour}
	now := time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC)
	window := ledger.WindowAt(hourly.Period, now).Start
	if _, err := l.Record(ctx, []ledger.Entry{{Key: "tenant:acme", Limit: hourly, Window: window, Units: 60, ID: "r1", At: now}}); err != nil {
		panic(err)
	}

	// A store that restarted empty.
	clock := floodgatetest.NewFakeClock(now)
	store := memstore.New(&memstore.Options{Clock: clock})
	defer store.Close()
	limiter, _ := floodgate.New(store, &floodgate.Options{Clock: clock})

	drifts, err := ledger.Reconcile(ctx, l, ledger.PeekUsed(limiter), &ledger.ReconcileOptions{Now: now, Repair: ledger.Raise(limiter)})
	if err != nil {
		panic(err)
	}
	for _, d := range drifts {
		fmt.Printf("%s: counter %d, ledger %d, repaired %v\n", d.Key, d.Counter, d.Units, d.Repaired)
	}
	d, _ := limiter.Peek(ctx, "tenant:acme", hourly)
	fmt.Println("remaining:", d.Remaining)
	// Output:
	// tenant:acme: counter 0, ledger 60, repaired true
	// remaining: 40
}

// A durable quota: the store is wrapped so that each commit is in the
// ledger before it is acknowledged; when the store loses its counter (a
// new, empty store here, as a Redis restarted without persistence), the
// next decision rebuilds it from the ledger instead of admitting the
// whole quota again.
func ExampleWrap() {
	ctx := context.Background()
	l, done := openExample(ctx)
	defer done()
	acc := ledger.Durable(l, nil)

	paid := floodgate.Limit{Limit: 100, Period: 24 * time.Hour, Durable: true}
	clock := floodgatetest.NewFakeClock(time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC))
	for _, name := range []string{"before the loss", "after the loss"} {
		store := memstore.New(&memstore.Options{Clock: clock})
		quotas, err := ledger.Wrap(store, acc, nil)
		if err != nil {
			panic(err)
		}
		limiter, err := floodgate.New(quotas, &floodgate.Options{Clock: clock})
		if err != nil {
			panic(err)
		}
		d, err := limiter.AllowN(ctx, "tenant:acme", paid, 60)
		fmt.Println(name+": allowed", d.Allowed, "remaining", d.Remaining, err)
		store.Close()
	}
	u, _ := l.Usage(ctx, "tenant:acme", paid.Period, clock.Now())
	fmt.Println("ledger:", u.Units, "units")
	// Output:
	// before the loss: allowed true remaining 40 <nil>
	// after the loss: allowed false remaining 40 <nil>
	// ledger: 60 units
}
