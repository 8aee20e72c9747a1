package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// TestDurableCalendar is issue 28's test of calendar periods: a monthly
// durable quota of 1000 for a tenant in America/New_York resets at local
// midnight on the 1st (05:00 UTC in winter, 04:00 in summer), and one
// anchored on the 15th resets at local midnight on the 15th, across the
// change to daylight saving time on 8 March 2026, on the memory store,
// Redis standalone and Redis Cluster, with an injected clock. The ledger's
// windows are those of the calendar (the bill's), the window ends come
// from Go's time package (time.Date in the zone), and a counter the store
// loses mid-month is rebuilt from the ledger in its calendar window.
func TestDurableCalendar(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	type topology struct {
		name string
		// open opens the store on clock; lose makes it lose every counter.
		open func(t *testing.T, clock floodgate.Clock) (s floodgate.Store, lose func())
	}
	topologies := []topology{
		{"memory", func(t *testing.T, clock floodgate.Clock) (floodgate.Store, func()) {
			var cur *memstore.Store
			open := func() *memstore.Store {
				s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
				t.Cleanup(func() { s.Close() })
				return s
			}
			cur = open()
			sw := &swapStore{Store: cur}
			return sw, func() { sw.Store = open() }
		}},
		{"redis_standalone", func(t *testing.T, clock floodgate.Clock) (floodgate.Store, func()) {
			r := redistest.Standalone(t)
			s, err := redisstore.Open(t.Context(), "redis://"+r.Addr, &redisstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, func() { r.MustCLI(t, "FLUSHALL") }
		}},
		{"redis_cluster", func(t *testing.T, clock floodgate.Clock) (floodgate.Store, func()) {
			c := redistest.StartCluster(t)
			s, err := redisstore.Open(t.Context(), "redis-cluster://"+strings.Join(c.Addrs(), ","), &redisstore.Options{Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, func() {
				for _, key := range []string{"tenant", "anchored"} {
					for _, l := range []floodgate.Limit{monthly(ny, 0), monthly(ny, 15)} {
						m, err := c.MasterFor(t.Context(), s.Key(key, l))
						if err != nil {
							t.Fatal(err)
						}
						m.MustCLI(t, "FLUSHALL")
					}
				}
			}
		}},
	}
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			local := func(s string) time.Time {
				u, err := time.ParseInLocation("2006-01-02 15:04:05", s, ny)
				if err != nil {
					t.Fatal(err)
				}
				return u
			}
			clock := floodgatetest.NewFakeClock(local("2026-02-28 23:00:00"))
			s, lose := tp.open(t, clock)
			lg := openSQLite(t)
			l := durableOver(t, s, ledger.Durable(lg, nil), nil, &floodgate.Options{Clock: clock})
			month := monthly(ny, 0)
			take := func(n int64) bool {
				t.Helper()
				res, d, err := l.Reserve(t.Context(), "tenant", month, n, nil)
				if err != nil {
					t.Fatalf("reserve %d at %v: %v", n, clock.Now().In(ny), err)
				}
				if d.Allowed {
					if _, err := res.Commit(t.Context(), n); err != nil {
						t.Fatalf("commit %d: %v", n, err)
					}
				}
				return d.Allowed
			}
			usage := func(at time.Time) ledger.Usage {
				t.Helper()
				u, err := lg.Usage(t.Context(), "tenant", ledger.WindowFor(month, at).Period, at)
				if err != nil {
					t.Fatal(err)
				}
				return u
			}

			// February: 900 used, the counter lost, 101 more denied.
			if !take(900) {
				t.Fatal("900 of 1000 denied")
			}
			lose()
			if take(101) {
				t.Fatal("101 admitted after the loss with 900 of 1000 used: the counter was not rebuilt in its calendar window")
			}
			feb := usage(clock.Now())
			if want := local("2026-02-01 00:00:00"); !feb.Window.Start.Equal(want) || feb.Window.Period != 28*24*time.Hour || feb.Units != 900 {
				t.Fatalf("February's usage %+v, want 900 units in [%v, +672h)", feb, want.UTC())
			}

			// 23:59:59.999999 is still February; local midnight is March.
			clock.Set(local("2026-03-01 00:00:00").Add(-time.Microsecond))
			if take(101) {
				t.Fatal("101 admitted a microsecond before local midnight on 1 March")
			}
			clock.Set(local("2026-03-01 00:00:00"))
			d, err := l.Peek(t.Context(), "tenant", month)
			if err != nil || d.Remaining != 1000 {
				t.Fatalf("at local midnight on 1 March: %+v, %v; want the whole quota", d, err)
			}
			if !take(1000) {
				t.Fatal("the whole quota denied at local midnight on 1 March")
			}
			// Go's time package: the window ends at time.Date(April 1) in New
			// York, 743 hours later (8 March skips an hour).
			d, err = l.Peek(t.Context(), "tenant", month)
			if end := time.Date(2026, time.April, 1, 0, 0, 0, 0, ny); err != nil || !clock.Now().Add(d.ResetAfter).Equal(end) || d.ResetAfter != 743*time.Hour {
				t.Fatalf("March's window ends after %v (%v), want at %v (743h)", d.ResetAfter, err, end)
			}

			// After the change to daylight saving time the counter is lost
			// again: rebuilt from March's entries, not February's.
			clock.Set(local("2026-03-20 12:00:00"))
			lose()
			if take(1) {
				t.Fatal("a unit admitted on 20 March with the month used up, after the loss")
			}
			mar := usage(clock.Now())
			if !mar.Window.Start.Equal(local("2026-03-01 00:00:00")) || mar.Window.Period != 743*time.Hour || mar.Units != 1000 {
				t.Fatalf("March's usage %+v, want 1000 units from local midnight, 743h", mar)
			}
			clock.Set(local("2026-04-01 00:00:00").Add(-time.Microsecond))
			if take(1) {
				t.Fatal("a unit admitted a microsecond before local midnight on 1 April")
			}
			clock.Set(local("2026-04-01 00:00:00")) // 04:00 UTC, no longer 05:00
			if !take(1000) {
				t.Fatal("the whole quota denied at local midnight on 1 April")
			}

			// The anchor: a month from the 15th, whose window from 15
			// February holds the change of 8 March.
			anchored := monthly(ny, 15)
			clock.Set(local("2026-03-14 23:59:59"))
			res, d, err := l.Reserve(t.Context(), "anchored", anchored, 10, nil)
			if err != nil || !d.Allowed {
				t.Fatalf("anchored reserve: %+v, %v", d, err)
			}
			if _, err := res.Commit(t.Context(), 10); err != nil {
				t.Fatal(err)
			}
			lose()
			if _, d, err := l.Reserve(t.Context(), "anchored", anchored, 991, nil); err != nil || d.Allowed {
				t.Fatalf("991 of the anchored month admitted with 10 used (rebuilt from the window from 15 February): %+v, %v", d, err)
			}
			clock.Set(local("2026-03-15 00:00:00"))
			if _, d, err := l.Reserve(t.Context(), "anchored", anchored, 1000, nil); err != nil || !d.Allowed {
				t.Fatalf("the anchored quota at local midnight on the 15th: %+v, %v", d, err)
			} else if end := time.Date(2026, time.April, 15, 0, 0, 0, 0, ny); !clock.Now().Add(d.ResetAfter).Equal(end) {
				t.Fatalf("the anchored window ends %v, want %v", clock.Now().Add(d.ResetAfter), end)
			}
		})
	}
}

// monthly is the durable quota of TestDurableCalendar: 1000 a month in
// New York, from day (0: the 1st).
func monthly(ny *time.Location, day int) floodgate.Limit {
	return floodgate.Limit{Limit: 1000, Durable: true, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny, Day: day}}
}

// swapStore is a memory store that the test replaces by a new, empty one
// to lose every counter, as a Redis restarted without persistence does.
type swapStore struct{ *memstore.Store }
