package goredisstore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// TestNew checks New's errors: a nil client, Options.TLS (the client has
// its own), and the options redisstore checks; and that a store it makes
// uses the options' prefix.
func TestNew(t *testing.T) {
	addr := redistest.Standalone(t).Addr
	c := newClient(t, addr)
	if _, err := New(nil, nil); err == nil {
		t.Error("New accepted a nil client")
	}
	if _, err := New(c, &redisstore.Options{TLS: redistest.NewCerts(t).ClientConfig()}); err == nil || !strings.Contains(err.Error(), "Options.TLS") {
		t.Errorf("New with Options.TLS: %v, want an error naming Options.TLS", err)
	}
	if _, err := New(c, &redisstore.Options{Prefix: "{x}"}); err == nil {
		t.Error("New accepted a prefix with braces")
	}
	s, err := New(c, &redisstore.Options{Prefix: "myapp"})
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.GCRA, 1, time.Second)
	if got, want := s.Key("u", l), "myapp:v1:gcra:1000000:{u}"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The client was the test's: Close left it open.
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}

// TestWaitOptions checks the go-redis clients that cannot send WAIT on a
// script's connection: a Ring, and a client whose ReadTimeout is not above
// WaitTimeout.
func TestWaitOptions(t *testing.T) {
	addr := redistest.Standalone(t).Addr
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}})
	t.Cleanup(func() { ring.Close() })
	if _, err := New(ring, &redisstore.Options{WaitReplicas: 1}); err == nil || !strings.Contains(err.Error(), "WAIT needs") {
		t.Errorf("a Ring with WaitReplicas: %v", err)
	}
	if _, err := New(ring, nil); err != nil {
		t.Errorf("a Ring without WaitReplicas: %v", err)
	}
	// go-redis sends a pipeline again when its read times out: a WAIT as
	// long as the read would run the script twice.
	short := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { short.Close() })
	if _, err := New(short, &redisstore.Options{WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "ReadTimeout") {
		t.Errorf("WaitTimeout above the go-redis ReadTimeout: %v", err)
	}
	if _, err := New(short, &redisstore.Options{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond}); err != nil {
		t.Errorf("WaitTimeout below the go-redis ReadTimeout: %v", err)
	}
}

// TestUnexpectedReply decodes replies of the wrong shape: each is an error
// wrapping ErrUnexpectedReply, never a panic.
func TestUnexpectedReply(t *testing.T) {
	c := conn{newClient(t, redistest.Standalone(t).Addr)}
	for _, src := range []string{
		"return 1",
		"return 'x'",
		"return {1, 'x'}",
		"return {1, {2}}",
		"return {1, 2.5}",
		"return redis.status_reply('OK')",
	} {
		_, err := c.Eval(t.Context(), src, []string{"k"}, nil, redisstore.Wait{})
		if src == "return {1, 2.5}" && err == nil {
			continue // Redis truncates Lua numbers to integers.
		}
		if !errors.Is(err, floodgate.ErrUnexpectedReply) {
			t.Errorf("%s: error %v, want ErrUnexpectedReply", src, err)
		}
	}
}

// TestScriptFlush checks that the adapter recognises NOSCRIPT and
// "Function not found": after SCRIPT FLUSH and FUNCTION FLUSH, each store
// loads what it runs again and decides, with no error, by EVALSHA and by
// FCALL.
func TestScriptFlush(t *testing.T) {
	srv := redistest.Standalone(t)
	c := newClient(t, srv.Addr)
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	for name, o := range map[string]*redisstore.Options{"evalsha": nil, "functions": {Functions: true}} {
		s := newStore(t, c, o)
		for i := range 3 {
			srv.MustCLI(t, "SCRIPT", "FLUSH")
			srv.MustCLI(t, "FUNCTION", "FLUSH")
			d, err := s.Apply(t.Context(), request("k", l, t0))
			if err != nil || !d.Allowed || d.Remaining != int64(9-i) {
				t.Errorf("%s: call %d after a flush: %+v %v", name, i, d, err)
			}
		}
	}
}

// TestSeedScenario is the problem Floodgate exists for, across client
// libraries: three instances, two over go-redis clients and one opened by
// redisstore.Open (rueidis), share one Redis, and ten goroutines in each
// race for the last five allowances of a limit. Exactly five win, for
// every algorithm, with the server's clock and with the callers' clock.
func TestSeedScenario(t *testing.T) {
	addr := redistest.Standalone(t).Addr
	prefix := testPrefix(t)
	for _, serverTime := range []bool{true, false} {
		name := "client_time"
		if serverTime {
			name = "server_time"
		}
		t.Run(name, func(t *testing.T) {
			var limiters []*floodgate.Limiter
			for i := range 3 {
				var s *redisstore.Store
				if i < 2 {
					s = newStore(t, newClient(t, addr), &redisstore.Options{Prefix: prefix})
				} else {
					var err error
					s, err = redisstore.Open(t.Context(), "redis://"+addr+"?dial_timeout="+testDialTimeout.String(), &redisstore.Options{Prefix: prefix})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { s.Close() })
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
			for _, alg := range floodgate.Algorithms {
				// A day (100 for a sliding window) is long enough that no
				// window ends and no token is refilled while the test runs.
				l := floodgate.Limit{Algorithm: alg, Limit: 100, Period: 24 * time.Hour}
				if alg == floodgate.FixedWindow {
					l.Window = floodgate.FirstHit
				}
				if alg == floodgate.SlidingWindow {
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
	checkTTLs(t, newClient(t, addr), prefix)
}

// TestCoalesce hammers one key from 64 goroutines through one go-redis
// store: every algorithm admits exactly its limit, and far fewer scripts
// run than decisions are made, because concurrent calls share runs.
func TestCoalesce(t *testing.T) {
	addr := redistest.Standalone(t).Addr
	admin := newClient(t, addr)
	s := newStore(t, newClient(t, addr), nil)
	for _, alg := range floodgate.Algorithms {
		for _, now := range []time.Time{t0, {}} {
			const goroutines, each, limit = 64, 8, 300
			l := limitOf(alg, limit, time.Hour)
			what := fmt.Sprintf("%s at %v", alg, now)
			if now.IsZero() {
				l.Period, what = 2*time.Hour, string(alg)+" at the server's time"
			}
			// A first call loads the script (NOSCRIPT is not counted).
			if _, err := s.Apply(t.Context(), request("warm", l, now)); err != nil {
				t.Fatal(err)
			}
			before := scriptCalls(t, admin)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range goroutines {
				wg.Go(func() {
					<-start
					for range each {
						d, err := s.Apply(t.Context(), request("hot", l, now))
						if err != nil {
							t.Errorf("%s: %v", what, err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			close(start)
			wg.Wait()
			scripts := scriptCalls(t, admin) - before
			const decisions = goroutines * each
			if admitted.Load() != limit {
				t.Errorf("%s: %d of %d admitted, want exactly %d", what, admitted.Load(), decisions, limit)
			}
			if scripts > decisions/2 {
				t.Errorf("%s: %d scripts for %d decisions from %d goroutines, want at most half", what, scripts, decisions, goroutines)
			}
			t.Logf("%s: %d scripts for %d decisions", what, scripts, decisions)
		}
	}
	if st := s.CoalesceStats(); st.Runs == 0 {
		t.Errorf("%+v, want shared runs", st)
	}
	checkTTLs(t, admin, "")
}

// TestCluster runs a batch of several limits of one subject, whose keys
// share a slot, through a go-redis Cluster client: all or nothing; then a
// batch and a reservation of two subjects in different slots.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t).Addrs()
	c := newClusterClient(t, addrs)
	prefix := testPrefix(t)
	s := newStore(t, c, &redisstore.Options{Prefix: prefix})
	limits := []floodgate.Limit{
		limitOf(floodgate.SlidingWindow, 3, time.Second),
		limitOf(floodgate.FixedWindow, 5, time.Hour),
		limitOf(floodgate.TokenBucket, 4, time.Minute),
		limitOf(floodgate.SlidingWindowLog, 4, time.Minute),
	}
	const subject = "{evil}"
	batch := func() floodgate.Decision {
		rs := make([]floodgate.Request, len(limits))
		for i, l := range limits {
			rs[i] = floodgate.Request{Key: subject, Limit: l, Cost: 1, Now: t0}
		}
		ds, err := s.ApplyBatch(t.Context(), rs)
		if err != nil {
			t.Fatal(err)
		}
		return floodgate.Combine(ds)
	}
	for i := range 3 {
		if d := batch(); !d.Allowed {
			t.Fatalf("batch %d denied: %+v", i, d)
		}
	}
	if d := batch(); d.Allowed || d.Remaining != 0 {
		t.Errorf("4th batch in a second: %+v, want denied", d)
	}
	// The denied batch took nothing from the hour.
	d, err := s.Apply(t.Context(), floodgate.Request{Key: subject, Limit: limits[1], Now: t0})
	if err != nil || d.Remaining != 2 {
		t.Errorf("the hour after a denied batch: %+v %v, want 2 remaining", d, err)
	}
	// A batch of two subjects in different slots: one script per slot,
	// and a denial by one gives back what the other took.
	tenant := floodgate.Request{Key: "acme", Limit: limitOf(floodgate.FixedWindow, 10, time.Hour), Cost: 1, Now: t0}
	user := floodgate.Request{Key: "acme/user:1", Limit: limitOf(floodgate.GCRA, 1, time.Hour), Cost: 1, Now: t0}
	if ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{tenant, user}); err != nil || !floodgate.Combine(ds).Allowed {
		t.Fatalf("tenant and user: %+v, %v", ds, err)
	}
	ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{tenant, user})
	if err != nil || ds[0].Allowed || ds[0].RetryAfter != 0 || ds[0].Remaining != 9 || ds[1].Allowed {
		t.Errorf("tenant and a user over the limit: %+v, %v; want both denied, the tenant's 9 given back", ds, err)
	}
	if st := s.CrossSlotStats(); st.Calls != 2 || st.Compensated != 1 || st.Refunded != 1 {
		t.Errorf("CrossSlotStats %+v, want 2 calls and 1 unit given back", st)
	}
	// A reservation over the two slots, denied by the user: nothing held.
	res, err := s.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{tenant, user}, ID: "r", TTL: time.Minute})
	if err != nil || res.Decisions[0].Allowed || res.Decisions[0].Remaining != 9 {
		t.Errorf("reserve denied by the user: %+v, %v; want denied, the tenant's 9 untouched", res, err)
	}
	// Single requests of many subjects reach every master.
	l := limitOf(floodgate.GCRA, 10, time.Minute)
	for i := range 100 {
		if _, err := s.Apply(t.Context(), request(fmt.Sprintf("user:%d", i), l, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	checkTTLs(t, c, prefix)
}

// TestTLS decides through a go-redis client that the application built
// for a redis-server that speaks only TLS and requires client
// certificates.
func TestTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.Standalone(t, redistest.WithTLS(certs, redistest.ClientCertRequired))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, TLSConfig: certs.ClientConfig(), MaxRetries: -1, DialTimeout: testDialTimeout})
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, nil)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.GCRA, floodgate.SlidingWindowLog} {
		l := limitOf(alg, 3, time.Minute)
		admitted := 0
		for range 5 {
			d, err := s.Apply(t.Context(), request("tls", l, t0))
			if err != nil {
				t.Fatalf("%s: %v", alg, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 3 {
			t.Errorf("%s: admitted %d of 5, want exactly 3", alg, admitted)
		}
	}
}
