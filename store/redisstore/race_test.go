package redisstore

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
)

// TestSeedScenario is the problem Floodgate exists for: three instances of
// an application (three Limiters over three clients) share one Redis, and
// ten goroutines in each race for the last five allowances of a limit.
// Exactly five win, for every algorithm, with the server's clock and with
// the callers' clock.
func TestSeedScenario(t *testing.T) {
	addr := standaloneAddr(t)
	prefix := testPrefix(t)
	for _, serverTime := range []bool{true, false} {
		name := "client_time"
		if serverTime {
			name = "server_time"
		}
		t.Run(name, func(t *testing.T) {
			// The three instances reach Redis through the three ways to
			// make a Store: New (rueidis), NewWithConn (here with the
			// rueidis adapter; package goredisstore runs this race through
			// go-redis) and Open.
			var limiters []*floodgate.Limiter
			for i := range 3 {
				var s *Store
				var err error
				switch i {
				case 0:
					s, err = New(newRueidis(t, addr), &Options{Prefix: prefix})
				case 1:
					s, err = NewWithConn(rueidisConn{newRueidis(t, addr)}, &Options{Prefix: prefix})
				case 2:
					s, err = Open(t.Context(), "redis://"+addr+"?dial_timeout="+testDialTimeout.String(), &Options{Prefix: prefix})
					if err == nil {
						t.Cleanup(func() { s.Close() })
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				var o floodgate.Options
				if !serverTime {
					o.Clock = floodgatetest.NewFakeClock(t0)
				}
				lim, err := floodgate.New(s, &o)
				if err != nil {
					t.Fatal(err)
				}
				limiters = append(limiters, lim)
			}
			checkTTLsAtEnd(t, newRueidis(t, addr), prefix)
			for _, alg := range floodgate.Algorithms {
				// A day is long enough that no token is refilled and no
				// first-hit window ends while the test runs.
				l := floodgate.Limit{Algorithm: alg, Limit: 100, Period: 24 * time.Hour}
				if alg == floodgate.FixedWindow {
					l.Window = floodgate.FirstHit
				}
				if alg == floodgate.SlidingWindow && serverTime {
					// An aligned window of 100 days ends during the test
					// only if it runs at that very millisecond.
					l.Period = 100 * 24 * time.Hour
				}
				key := name + "/" + string(alg)
				take := func(lim *floodgate.Limiter, n int64) bool {
					if alg == floodgate.Concurrency {
						lease, _, err := lim.AcquireN(t.Context(), key, l, n)
						if err != nil {
							t.Error(err)
						}
						return lease != nil
					}
					d, err := lim.AllowN(t.Context(), key, l, n)
					if err != nil {
						t.Error(err)
					}
					return d.Allowed
				}
				if !take(limiters[0], 95) {
					t.Fatalf("%s: the first 95 were denied", alg)
				}
				var won atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for _, lim := range limiters {
					for range 10 {
						wg.Go(func() {
							<-start
							if take(lim, 1) {
								won.Add(1)
							}
						})
					}
				}
				close(start)
				wg.Wait()
				if got := won.Load(); got != 5 {
					t.Errorf("%s: %d of 30 racers won the last 5 allowances", alg, got)
				}
			}
		})
	}
}

// TestSixtyPerMinute sends 100 concurrent requests to a limit of 60 per
// minute: exactly 60 pass.
func TestSixtyPerMinute(t *testing.T) {
	addr := standaloneAddr(t)
	for _, tc := range []struct {
		name  string
		clock floodgate.Clock
		l     floodgate.Limit
	}{
		{"aligned", floodgatetest.NewFakeClock(t0.Add(17 * time.Second)), floodgate.Limit{Limit: 60, Period: time.Minute}},
		{"first_hit_server_time", nil, floodgate.Limit{Limit: 60, Period: time.Minute, Window: floodgate.FirstHit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := testStore(t, addr, nil)
			lim, err := floodgate.New(s, &floodgate.Options{Clock: tc.clock})
			if err != nil {
				t.Fatal(err)
			}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					d, err := lim.Allow(t.Context(), "api", tc.l)
					if err != nil {
						t.Error(err)
					}
					if d.Allowed {
						allowed.Add(1)
					}
				})
			}
			wg.Wait()
			if got := allowed.Load(); got != 60 {
				t.Errorf("%d of 100 allowed, want 60", got)
			}
		})
	}
}
