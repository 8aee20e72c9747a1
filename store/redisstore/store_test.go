package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// testStore returns a Store over a fresh rueidis client of addr, with a key
// prefix of the test's own, closes it when the test ends, and then checks
// that every key it left has a TTL.
func testStore(t testing.TB, addr string, opts *Options) (*Store, rueidis.Client) {
	t.Helper()
	c := newRueidis(t, addr)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = testPrefix(t)
	}
	s, err := New(c, &o)
	if err != nil {
		t.Fatal(err)
	}
	checkTTLsAtEnd(t, c, o.Prefix)
	// Before the TTL check (cleanups run last first): Close stops the
	// sweepers and gives back the local budgets' units.
	t.Cleanup(func() { s.Close() })
	return s, c
}

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func limitOf(alg floodgate.Algorithm, n int64, period time.Duration) floodgate.Limit {
	return floodgate.Limit{Algorithm: alg, Limit: n, Period: period}
}

// request is a request of cost 1 under l, with a lease for concurrency.
func request(key string, l floodgate.Limit, now time.Time) floodgate.Request {
	r := floodgate.Request{Key: key, Limit: l, Cost: 1, Now: now}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease = fmt.Sprintf("lease-%d", leaseSeq.Add(1))
	}
	return r
}

var leaseSeq atomic.Int64

func TestServerAndClientTime(t *testing.T) {
	addr := standaloneAddr(t)
	server, _ := testStore(t, addr, nil)
	clock := floodgatetest.NewFakeClock(t0)
	client, _ := testStore(t, addr, &Options{Clock: clock})
	for _, alg := range floodgate.Algorithms {
		l := limitOf(alg, 10, time.Hour)
		d, err := server.Apply(t.Context(), request("k", l, time.Time{}))
		if err != nil {
			t.Fatal(err)
		}
		if skew := time.Since(d.Now); skew < -5*time.Second || skew > 5*time.Second {
			t.Errorf("%s: server time %v is %v away from this clock", alg, d.Now, skew)
		}
		if !d.Allowed || d.Remaining != 9 {
			t.Errorf("%s: server time: %+v, want allowed with 9 remaining", alg, d)
		}
		d, err = client.Apply(t.Context(), request("k", l, time.Time{}))
		if err != nil {
			t.Fatal(err)
		}
		if !d.Now.Equal(t0) {
			t.Errorf("%s: with Clock, decided at %v, want the clock's %v", alg, d.Now, t0)
		}
		at := t0.Add(time.Minute)
		if d, err = client.Apply(t.Context(), request("k", l, at)); err != nil || !d.Now.Equal(at) {
			t.Errorf("%s: Request.Now %v: decided at %v, %v", alg, at, d.Now, err)
		}
	}
}

// TestScriptFlush empties Redis's script cache again and again while
// requests run: EVALSHA fails with NOSCRIPT, the store runs EVAL, and no
// caller sees an error or a wrong count.
func TestScriptFlush(t *testing.T) {
	addr := standaloneAddr(t)
	s, c := testStore(t, addr, nil)
	stop := make(chan struct{})
	var flushes atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.Do(context.Background(), c.B().ScriptFlush().Build()).Error(); err == nil {
				flushes.Add(1)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	defer close(stop)
	decideUnderFlush(t, s)
	if flushes.Load() == 0 {
		t.Error("SCRIPT FLUSH never ran")
	}
}

func TestContext(t *testing.T) {
	srv := redistest.Standalone(t)
	s, _ := testStore(t, srv.Addr, nil)
	l := limitOf(floodgate.FixedWindow, 5, time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Apply(ctx, request("k", l, t0)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: error %v, want one wrapping context.Canceled", err)
	}
	// A paused server never answers: the deadline ends the call.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer srv.Resume()
	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Apply(ctx, request("k", l, t0))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paused server: error %v, want one wrapping context.DeadlineExceeded", err)
	}
	if err != nil && !strings.Contains(err.Error(), "fixed_window") {
		t.Errorf("error %q does not name the algorithm", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the call took %v past its 100ms deadline", took)
	}
}

func TestCloseAndReset(t *testing.T) {
	addr := standaloneAddr(t)
	s, c := testStore(t, addr, nil)
	l := limitOf(floodgate.TokenBucket, 2, time.Minute)
	for range 2 {
		if _, err := s.Apply(t.Context(), request("k", l, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if d, _ := s.Apply(t.Context(), request("k", l, t0)); d.Allowed {
		t.Fatal("third request allowed")
	}
	if err := s.Reset(t.Context(), "k", l); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.Apply(t.Context(), request("k", l, t0)); !d.Allowed || d.Remaining != 1 {
		t.Errorf("after Reset: %+v, want allowed with 1 remaining", d)
	}
	if err := s.Reset(t.Context(), "", l); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("Reset of an empty key: %v", err)
	}
	if err := s.Reset(t.Context(), "k", floodgate.Limit{}); !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("Reset of an invalid limit: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Apply(t.Context(), request("k", l, t0)); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if _, err := s.ApplyBatch(t.Context(), []floodgate.Request{request("k", l, t0), request("k", l, t0)}); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("ApplyBatch after Close: %v, want ErrClosed", err)
	}
	if err := s.Reset(t.Context(), "k", l); !errors.Is(err, floodgate.ErrClosed) {
		t.Errorf("Reset after Close: %v, want ErrClosed", err)
	}
	// The client was the test's: Close left it open.
	if err := c.Do(t.Context(), c.B().Ping().Build()).Error(); err != nil {
		t.Errorf("the caller's client after Close: %v", err)
	}
}

func TestOptions(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	for _, prefix := range []string{"a{b", "}", "{x}"} {
		if _, err := New(c, &Options{Prefix: prefix}); err == nil {
			t.Errorf("New accepted the prefix %q", prefix)
		}
	}
	if _, err := New(nil, nil); err == nil {
		t.Error("New accepted a nil client")
	}
	if _, err := NewWithConn(nil, nil); err == nil {
		t.Error("NewWithConn accepted a nil Conn")
	}
	if _, err := NewWithConn(rueidisConn{c}, &Options{TLS: &tls.Config{}}); err == nil || !strings.Contains(err.Error(), "Options.TLS") {
		t.Errorf("NewWithConn with Options.TLS: %v, want an error naming Options.TLS", err)
	}
	s, err := New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.GCRA, 1, time.Second)
	if got, want := s.Key("u", l), "floodgate:v1:gcra:1000000:{u}"; got != want {
		t.Errorf("default key %q, want %q", got, want)
	}
}

func TestBatchErrors(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), nil)
	l := limitOf(floodgate.FixedWindow, 5, time.Minute)
	_, err := s.ApplyBatch(t.Context(), []floodgate.Request{request("a", l, t0), {Key: "a"}})
	if !errors.Is(err, floodgate.ErrInvalidLimit) {
		t.Errorf("batch with an invalid limit: %v, want ErrInvalidLimit", err)
	}
	ds, err := s.ApplyBatch(t.Context(), nil)
	if err != nil || len(ds) != 0 {
		t.Errorf("empty batch: %v, %v", ds, err)
	}
}

// TestBatch checks "10 per second and 1000 per hour" all or nothing, on one
// script run per batch.
func TestBatch(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), nil)
	perSecond := limitOf(floodgate.SlidingWindow, 10, time.Second)
	perHour := limitOf(floodgate.FixedWindow, 15, time.Hour)
	batch := func(now time.Time) []floodgate.Decision {
		t.Helper()
		ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{
			{Key: "u", Limit: perSecond, Cost: 1, Now: now},
			{Key: "u", Limit: perHour, Cost: 1, Now: now},
		})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	for i := range 10 {
		if d := floodgate.Combine(batch(t0)); !d.Allowed {
			t.Fatalf("request %d denied: %+v", i, d)
		}
	}
	ds := batch(t0)
	if ds[0].Allowed || ds[0].RetryAfter <= 0 || ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 5 {
		t.Fatalf("11th in a second: %+v, want denied by the second limit, the hour's unchanged (5 remaining, RetryAfter 0)", ds)
	}
	for i := range 5 {
		if d := floodgate.Combine(batch(t0.Add(time.Duration(2+i) * time.Second))); !d.Allowed {
			t.Fatalf("request %d of the next seconds denied: %+v", i, d)
		}
	}
	ds = batch(t0.Add(10 * time.Second))
	if ds[0].Allowed || ds[0].RetryAfter != 0 || ds[1].Allowed || ds[1].Remaining != 0 {
		t.Fatalf("16th in the hour: %+v, want denied by the hour", ds)
	}
}

// TestForeignKey puts something else than a state where the store keeps
// one: the store answers an error wrapping ErrUnexpectedReply and leaves
// the key alone.
func TestForeignKey(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	for _, alg := range floodgate.Algorithms {
		l := limitOf(alg, 5, time.Minute)
		key := s.Key("k", l)
		for _, put := range []rueidis.Completed{
			c.B().Set().Key(key).Value("garbage").Ex(time.Minute).Build(),
			c.B().Hset().Key(key).FieldValue().FieldValue("a", "1").Build(),
		} {
			c.Do(t.Context(), c.B().Del().Key(key).Build())
			if err := c.Do(t.Context(), put).Error(); err != nil {
				t.Fatal(err)
			}
			c.Do(t.Context(), c.B().Expire().Key(key).Seconds(60).Build())
			dump, _ := c.Do(t.Context(), c.B().Dump().Key(key).Build()).ToString()
			_, err := s.Apply(t.Context(), request("k", l, t0))
			if !errors.Is(err, floodgate.ErrUnexpectedReply) {
				t.Errorf("%s over %v: %v, want ErrUnexpectedReply", alg, put.Commands(), err)
			}
			_, err = s.ApplyBatch(t.Context(), []floodgate.Request{request("k", limitOf(floodgate.GCRA, 1, time.Second), t0), request("k", l, t0)})
			if !errors.Is(err, floodgate.ErrUnexpectedReply) {
				t.Errorf("%s batch over %v: %v, want ErrUnexpectedReply", alg, put.Commands(), err)
			}
			if after, _ := c.Do(t.Context(), c.B().Dump().Key(key).Build()).ToString(); after != dump {
				t.Errorf("%s: the foreign key changed", alg)
			}
			if n, _ := c.Do(t.Context(), c.B().Exists().Key(s.Key("k", limitOf(floodgate.GCRA, 1, time.Second))).Build()).AsInt64(); n != 0 {
				t.Errorf("%s: the batch wrote its first key before failing on the second", alg)
			}
		}
		c.Do(t.Context(), c.B().Del().Key(key).Build())
	}
}

// TestScriptArguments runs the scripts with arguments the store never
// sends: each is refused with "ERR floodgate: <field>", before any write.
func TestScriptArguments(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	good := []string{"1750000000000000", "10", "1000000", "1", "0", "0", ""}
	for _, tc := range []struct {
		alg   floodgate.Algorithm
		i     int
		value string
		field string
	}{
		{floodgate.FixedWindow, 0, "x", "now_us"},
		{floodgate.FixedWindow, 0, "1.5", "now_us"},
		{floodgate.FixedWindow, 0, "-2", "now_us"},
		{floodgate.FixedWindow, 0, "9999999999999999", "now_us"},
		{floodgate.FixedWindow, 0, "1e15", "now_us"},
		{floodgate.FixedWindow, 1, "-1", "limit"},
		{floodgate.FixedWindow, 1, "1099511627777", "limit"},
		{floodgate.FixedWindow, 2, "0", "period"},
		{floodgate.FixedWindow, 2, "281474976710657", "period"},
		{floodgate.FixedWindow, 3, "-1", "cost"},
		{floodgate.FixedWindow, 3, "", "cost"},
		{floodgate.FixedWindow, 4, "3", "burst"},
		{floodgate.FixedWindow, 5, "16", "flags"},
		{floodgate.FixedWindow, 5, "8", "windows"}, // a calendar's, without its windows
		{floodgate.FixedWindow, 5, "4", "flags"},
		{floodgate.FixedWindow, 6, "lease", "id"},
		{floodgate.GCRA, 5, "1", "flags"},
		{floodgate.GCRA, 4, "1099511627776", "burst"},
		{floodgate.SlidingWindow, 1, "4503599627", "limit"},
		{floodgate.SlidingWindowLog, 1, "100001", "limit"},
		{floodgate.SlidingWindowLog, 6, "", "id"},
		{floodgate.SlidingWindowLog, 6, "a:b", "id"},
		{floodgate.Concurrency, 6, "", "id"},
		{floodgate.Concurrency, 6, strings.Repeat("a", 65), "id"},
		{floodgate.Concurrency, 6, "a.0", "id"},
	} {
		args := append([]string(nil), good...)
		switch tc.alg {
		case floodgate.GCRA:
			args[4] = "10"
		case floodgate.SlidingWindowLog, floodgate.Concurrency:
			args[6] = "ok"
		}
		args[tc.i] = tc.value
		key := s.prefix + ":args"
		_, err := s.runner.run(t.Context(), scripts.single[tc.alg], []string{key}, args)
		if err == nil || !strings.Contains(err.Error(), "floodgate: "+tc.field+":") {
			t.Errorf("%s with %s = %q: error %v, want floodgate: %s: ...", tc.alg, tc.field, tc.value, err, tc.field)
		}
		if !errors.Is(err, floodgate.ErrInvalidRequest) {
			t.Errorf("%s with %s = %q: error %v does not wrap ErrInvalidRequest", tc.alg, tc.field, tc.value, err)
		}
		if n, _ := c.Do(t.Context(), c.B().Exists().Key(key).Build()).AsInt64(); n != 0 {
			t.Errorf("%s with %s = %q wrote its key", tc.alg, tc.field, tc.value)
		}
	}
	// Wrong numbers of keys and arguments, and a batch of an unknown
	// algorithm.
	if _, err := s.runner.run(t.Context(), scripts.single[floodgate.GCRA], []string{"a", "b"}, good); err == nil {
		t.Error("two keys accepted")
	}
	if _, err := s.runner.run(t.Context(), scripts.single[floodgate.GCRA], []string{"a"}, good[:6]); err == nil {
		t.Error("six arguments accepted")
	}
	if _, err := s.runner.run(t.Context(), scripts.batch, []string{"a", "a"}, append(append([]string{"gcra"}, good...), append([]string{"leaky"}, good...)...)); err == nil || !strings.Contains(err.Error(), "algorithm") {
		t.Errorf("batch with an unknown algorithm: %v", err)
	}
}

// TestUnexpectedReply decodes replies of the wrong shape, through the
// rueidis adapter (package goredisstore checks its own): each is an error
// wrapping ErrUnexpectedReply, never a panic.
func TestUnexpectedReply(t *testing.T) {
	addr := standaloneAddr(t)
	conns := map[string]Conn{
		"rueidis": rueidisConn{newRueidis(t, addr)},
	}
	for name, c := range conns {
		for _, src := range []string{
			"return 1",
			"return 'x'",
			"return {1, 'x'}",
			"return {1, {2}}",
			"return {1, 2.5}",
			"return redis.status_reply('OK')",
		} {
			_, err := c.Eval(t.Context(), src, []string{"k"}, nil, Wait{})
			if src == "return {1, 2.5}" && err == nil {
				continue // Redis truncates Lua numbers to integers.
			}
			if !errors.Is(err, floodgate.ErrUnexpectedReply) {
				t.Errorf("%s: %s: error %v, want ErrUnexpectedReply", name, src, err)
			}
		}
	}
	for _, tc := range []struct {
		v       []int64
		wantNow int64
	}{
		{[]int64{2, 5, 1, 0, 0, 1}, -1},
		{[]int64{1, -1, 0, 0, 0, 1}, -1},
		{[]int64{1, 5, 6, 0, 0, 1}, -1},
		{[]int64{1, 5, -1, 0, 0, 1}, -1},
		{[]int64{1, 5, 1, -3, 0, 1}, -1},
		{[]int64{1, 5, 1, 0, 7, 1}, -1},
		{[]int64{0, 5, 1, 0, -2, 1}, -1},
		{[]int64{0, 5, 1, 0, 0, -1}, -1},
		{[]int64{0, 5, 1, 0, 0, 7}, 8},
	} {
		if _, err := decode(tc.v, tc.wantNow); !errors.Is(err, floodgate.ErrUnexpectedReply) {
			t.Errorf("decode(%v, %d): %v, want ErrUnexpectedReply", tc.v, tc.wantNow, err)
		}
	}
	if d, err := decode([]int64{0, 5, 0, 10, -1, 7}, 7); err != nil || d.RetryAfter != floodgate.Never || d.ResetAfter != 10*time.Microsecond {
		t.Errorf("decode of a valid denial: %+v, %v", d, err)
	}
}

// TestLongKey decides a 1 MiB key, which the store hashes.
func TestLongKey(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	key := strings.Repeat("k", floodgate.MaxKeyLen)
	l := limitOf(floodgate.FixedWindow, 1, time.Minute)
	d, err := s.Apply(t.Context(), request(key, l, t0))
	if err != nil || !d.Allowed {
		t.Fatalf("1 MiB key: %+v, %v", d, err)
	}
	if d, _ := s.Apply(t.Context(), request(key, l, t0)); d.Allowed {
		t.Error("second request of the 1 MiB key allowed")
	}
	if d, _ := s.Apply(t.Context(), request(key[1:], l, t0)); !d.Allowed {
		t.Error("a key one byte shorter shares its state")
	}
	if n := len(s.Key(key, l)); n > 200 {
		t.Errorf("the Redis key of a 1 MiB key is %d bytes", n)
	}
	if n, _ := c.Do(t.Context(), c.B().Exists().Key(stateKey(s.Key(key, l), l)).Build()).AsInt64(); n != 1 {
		t.Error("no state under the hashed key")
	}
}

// TestDistinctSubjects decides one request for each of many subjects that
// differ only in the bytes the encoding escapes: each has its own state.
func TestDistinctSubjects(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), nil)
	l := limitOf(floodgate.FixedWindow, 1, time.Minute)
	subjects := []string{"{a}", "%7Ba%7D", "%7Ba}", "{a%7D", "#a", "%23a", "a:b", "a", "a ", "\x00a", "{}", "%7B%7D", strings.Repeat("%", 129), strings.Repeat("%", 128)}
	for _, sub := range subjects {
		if d, err := s.Apply(t.Context(), request(sub, l, t0)); err != nil || !d.Allowed {
			t.Errorf("subject %.40q: %+v %v, want its own budget", sub, d, err)
		}
	}
}

// TestLogMembersUnique sends many requests at the same microsecond to a
// sliding log: each unit is its own member, so the count is exact.
func TestLogMembersUnique(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	l := limitOf(floodgate.SlidingWindowLog, 1000, time.Minute)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 10 {
				r := request("same-us", l, t0)
				r.Cost = 3
				if d, err := s.Apply(t.Context(), r); err != nil || !d.Allowed {
					t.Errorf("%+v %v", d, err)
				}
			}
		})
	}
	wg.Wait()
	if n, _ := c.Do(t.Context(), c.B().Zcard().Key(s.Key("same-us", l)).Build()).AsInt64(); n != 600 {
		t.Errorf("the log holds %d entries, want 600", n)
	}
}

// TestLeases acquires, renews and releases leases through a Limiter.
func TestLeases(t *testing.T) {
	s, _ := testStore(t, standaloneAddr(t), nil)
	lim, err := floodgate.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := limitOf(floodgate.Concurrency, 2, time.Minute)
	a, _, err := lim.Acquire(t.Context(), "job", l)
	if err != nil || a == nil {
		t.Fatalf("first lease: %v", err)
	}
	b, _, _ := lim.Acquire(t.Context(), "job", l)
	if c, d, _ := lim.Acquire(t.Context(), "job", l); c != nil || d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("third lease: %v %+v", c, d)
	}
	if d, err := a.Renew(t.Context()); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("renew: %+v %v", d, err)
	}
	if err := b.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c, d, _ := lim.Acquire(t.Context(), "job", l); c == nil || !d.Allowed {
		t.Errorf("after a release: %+v", d)
	}
}

// decideUnderFlush sends 200 requests of every algorithm against a limit of
// 50 from 8 goroutines, then a batch, while something flushes the scripts
// or functions: no call may fail, and exactly 50 of each 200 are admitted.
func decideUnderFlush(t *testing.T, s *Store) {
	t.Helper()
	for _, alg := range floodgate.Algorithms {
		l := limitOf(alg, 50, time.Hour)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 25 {
					d, err := s.Apply(t.Context(), request("flush", l, t0))
					if err != nil {
						t.Errorf("%s goroutine %d: %v", alg, g, err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := allowed.Load(); got != 50 {
			t.Errorf("%s: %d of 200 allowed, want 50", alg, got)
		}
		// The batch script too.
		rs := []floodgate.Request{request("flush-batch", l, t0), request("flush-batch", limitOf(alg, 5, time.Minute), t0)}
		if _, err := s.ApplyBatch(t.Context(), rs); err != nil {
			t.Errorf("%s batch: %v", alg, err)
		}
	}
}

// TestKeepTTL checks when a write leaves a window's key's TTL as it is
// (SET KEEPTTL) and when it sets it again (PX): each case writes the key,
// stretches its TTL to ten hours by hand, and writes again in the same
// window. KEEPTTL leaves the ten hours; PX brings the TTL back to the
// window's end. KEEPTTL is for a write decided at the server's time while
// the window's end is over a second away; a request's own time (here
// Request.Now) and the last second of a window (here a window of one
// second) take PX, as every write did before KEEPTTL.
func TestKeepTTL(t *testing.T) {
	s, c := testStore(t, standaloneAddr(t), nil)
	const stretched = 10 * time.Hour
	for _, tc := range []struct {
		name string
		l    floodgate.Limit
		now  time.Time
		keep bool
	}{
		// A first_hit window ends an hour after its first request, and a
		// sliding window's state two periods after its window's start, so
		// both are far from their end whatever the clock says.
		{"fixed_window first_hit, server time", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 100, Period: time.Hour, Window: floodgate.FirstHit}, time.Time{}, true},
		{"sliding_window, server time", limitOf(floodgate.SlidingWindow, 100, time.Hour), time.Time{}, true},
		// An aligned fixed window's counter, and a sliding window's
		// counters, get their TTL when the window's counter is made, and no
		// write in that window changes it (fixed_window.lua,
		// sliding_window.lua).
		{"fixed_window, own time", limitOf(floodgate.FixedWindow, 100, time.Hour), t0, true},
		{"sliding_window, own time", limitOf(floodgate.SlidingWindow, 100, time.Hour), t0, true},
		{"fixed_window of a second, server time", limitOf(floodgate.FixedWindow, 100, time.Second), time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			subject := "ttl-" + strings.ReplaceAll(tc.name, " ", "-")
			key := stateKey(s.Key(subject, tc.l), tc.l)
			apply := func() {
				t.Helper()
				if _, err := s.Apply(t.Context(), floodgate.Request{Key: subject, Limit: tc.l, Cost: 1, Now: tc.now}); err != nil {
					t.Fatal(err)
				}
			}
			apply()
			if err := c.Do(t.Context(), c.B().Pexpire().Key(key).Milliseconds(stretched.Milliseconds()).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			apply()
			ms, err := c.Do(t.Context(), c.B().Pttl().Key(key).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if kept := ms > (stretched - time.Minute).Milliseconds(); kept != tc.keep {
				t.Errorf("PTTL %d ms after the second write; KEEPTTL %v, want %v", ms, kept, tc.keep)
			}
		})
	}
}
