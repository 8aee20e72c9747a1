package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestCoalesce hammers one key from 64 goroutines through stores on a
// standalone Redis (EVALSHA and functions; package goredisstore runs it
// through go-redis) and a
// Cluster: every algorithm admits exactly its limit, and far fewer scripts
// run than decisions are made, because concurrent calls share runs. The
// same load without coalescing runs one script per decision.
func TestCoalesce(t *testing.T) {
	addr := standaloneAddr(t)
	type target struct {
		name  string
		store func(t *testing.T) (*Store, rueidis.Client)
	}
	targets := []target{
		{"rueidis", func(t *testing.T) (*Store, rueidis.Client) { return testStore(t, addr, nil) }},
		{"functions", func(t *testing.T) (*Store, rueidis.Client) { return testStore(t, addr, &Options{Functions: true}) }},
		{"off", func(t *testing.T) (*Store, rueidis.Client) { return testStore(t, addr, &Options{Coalesce: -1}) }},
	}
	if !testing.Short() {
		targets = append(targets, target{"cluster", func(t *testing.T) (*Store, rueidis.Client) {
			cl := redistest.StartCluster(t)
			c := newRueidisCluster(t, cl.Addrs())
			s, err := New(c, &Options{Prefix: testPrefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			// The hot key's node, for its command stats.
			for _, a := range cl.Addrs() {
				n := newRueidis(t, a)
				if err := n.Do(t.Context(), n.B().Get().Key(s.Key("hot", limitOf(floodgate.FixedWindow, 1, time.Hour))).Build()).Error(); !rueidis.IsRedisNil(err) {
					continue // MOVED: another node's slot
				}
				return s, n
			}
			t.Fatal("no node owns the hot key")
			return nil, nil
		}})
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			s, stats := tg.store(t)
			// Every algorithm, decided at the requests' own time (t0) and
			// at the server's (a zero Now; a period of its own, so another
			// key).
			type mode struct {
				name   string
				now    time.Time
				period time.Duration
			}
			for i := range 2 * len(floodgate.Algorithms) {
				alg := floodgate.Algorithms[i/2]
				m := []mode{{"own time", t0, time.Hour}, {"server time", time.Time{}, 2 * time.Hour}}[i%2]
				const goroutines, each, limit = 64, 8, 300
				l := limitOf(alg, limit, m.period)
				what := fmt.Sprintf("%s at %s", alg, m.name)
				// A first call loads the scripts (NOSCRIPT is not counted).
				if _, err := s.Apply(t.Context(), request("warm", l, m.now)); err != nil {
					t.Fatal(err)
				}
				before := scriptCalls(t, stats)
				var admitted atomic.Int64
				start := make(chan struct{})
				var wg sync.WaitGroup
				for range goroutines {
					wg.Go(func() {
						<-start
						for range each {
							d, err := s.Apply(t.Context(), request("hot", l, m.now))
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
				scripts := scriptCalls(t, stats) - before
				const decisions = goroutines * each
				if admitted.Load() != limit {
					t.Errorf("%s: %d of %d admitted, want exactly %d", what, admitted.Load(), decisions, limit)
				}
				if tg.name == "off" {
					if scripts != decisions {
						t.Errorf("%s without coalescing: %d scripts for %d decisions, want one each", what, scripts, decisions)
					}
				} else if scripts > decisions/2 {
					t.Errorf("%s: %d scripts for %d decisions from %d goroutines, want at most half", what, scripts, decisions, goroutines)
				}
				t.Logf("%s: %d scripts for %d decisions", what, scripts, decisions)
			}
		})
	}
}

// pauseWrites holds every script on the server until the returned func is
// called (CLIENT PAUSE WRITE, which holds EVAL, EVALSHA and FCALL and lets
// CLIENT UNPAUSE through).
func pauseWrites(t *testing.T, c rueidis.Client) func() {
	t.Helper()
	if err := c.Do(t.Context(), c.B().ClientPause().Timeout(60_000).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unpause := func() {
		once.Do(func() {
			if err := c.Do(context.Background(), c.B().ClientUnpause().Build()).Error(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unpause)
	return unpause
}

// loadMulti loads the multi scripts, so that a first run is one call, not
// NOSCRIPT and EVAL.
func loadMulti(t *testing.T, c rueidis.Client) {
	t.Helper()
	for _, sc := range append([]*script{scripts.multi, scripts.fastMulti, scripts.gcraMulti, scripts.slidingMulti}, slices.Collect(maps.Values(scripts.multiOf))...) {
		if err := c.Do(t.Context(), c.B().ScriptLoad().Script(sc.src).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// queued is the number of calls waiting in the store's group (standalone:
// the only one).
func queued(s *Store) int {
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return len(s.co.all.queue)
}

// waitQueued waits, bounded, until n calls wait in s.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for queued(s) != n {
		if time.Now().After(end) {
			t.Fatalf("%d calls queued after 10s, want %d", queued(s), n)
		}
		time.Sleep(time.Millisecond) // polling a condition, bounded above
	}
}

// TestCoalesceRun makes one run of several calls, deterministically: with
// Coalesce 1 and the server's scripts paused, a first call holds the only
// run and the next ones queue; once resumed they go out as one script.
// One of them is on a key that holds a foreign value: it fails alone with
// its own error and changes nothing, and the others are decided.
func TestCoalesceRun(t *testing.T) {
	addr := standaloneAddr(t)
	s, c := testStore(t, addr, &Options{Coalesce: 1})
	l := limitOf(floodgate.FixedWindow, 2, time.Hour)
	if _, err := s.Apply(t.Context(), request("warm", l, t0)); err != nil {
		t.Fatal(err)
	}
	foreign := s.Key("foreign", l)
	if err := c.Do(t.Context(), c.B().Lpush().Key(foreign).Element("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	admin := newRueidis(t, addr)
	before, timeBefore := scriptCalls(t, admin), commandCalls(t, admin, "time")
	first, unpause := holdRun(t, s, admin, "first", l)
	type outcome struct {
		key string
		d   floodgate.Decision
		err error
	}
	out := make(chan outcome, 8)
	keys := []string{"a", "b", "a", "foreign", "a", "b"}
	for _, k := range keys {
		go func() {
			d, err := s.Apply(t.Context(), request(k, l, t0))
			out <- outcome{k, d, err}
		}()
	}
	waitQueued(t, s, len(keys))
	unpause()
	res := <-first
	got := map[string][]outcome{"first": {{"first", res.d, res.err}}}
	for range keys {
		o := <-out
		got[o.key] = append(got[o.key], o)
	}
	if st := s.CoalesceStats(); st.Runs != 1 || st.Decisions != int64(len(keys)) {
		t.Errorf("%+v, want one shared run of %d requests", st, len(keys))
	}
	// Every request carried its own time: no script, shared or not, may
	// call TIME (Options.ClientTime is for a Redis that forbids it).
	if n := commandCalls(t, admin, "time") - timeBefore; n != 0 {
		t.Errorf("TIME ran %d times for requests that all carried their own time", n)
	}
	// first alone, then one run of six, then the foreign one again alone:
	// fixed_window_fast.lua, which leaves a key that holds something to
	// fixed_window.lua, then that script, new to the server (EVALSHA,
	// NOSCRIPT, EVAL).
	if n := scriptCalls(t, admin) - before; n != 5 {
		t.Errorf("%d scripts ran, want 5: the first call, one run of %d, the failed call again (3 scripts)", n, len(keys))
	}
	allowed := func(key string) (n int) {
		for _, o := range got[key] {
			if o.err != nil {
				t.Errorf("%s: %v", key, o.err)
			}
			if o.d.Allowed {
				n++
			}
		}
		return n
	}
	if a, b, f := allowed("a"), allowed("b"), allowed("first"); a != 2 || b != 2 || f != 1 {
		t.Errorf("admitted a %d of 3, b %d of 2, first %d of 1; want 2, 2, 1", a, b, f)
	}
	if o := got["foreign"][0]; !errors.Is(o.err, floodgate.ErrUnexpectedReply) {
		t.Errorf("foreign key: %+v, %v; want an error wrapping ErrUnexpectedReply", o.d, o.err)
	}
	if v, err := c.Do(t.Context(), c.B().Lrange().Key(foreign).Start(0).Stop(-1).Build()).AsStrSlice(); err != nil || fmt.Sprint(v) != "[x]" {
		t.Errorf("the foreign key holds %v, %v; want it unchanged", v, err)
	}
	// Every key of the test's prefix must have a TTL when it ends.
	if err := c.Do(t.Context(), c.B().Del().Key(foreign).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// TestCoalesceFullRun checks that calls that fill a run go out at once,
// past the runs-in-flight limit: with Coalesce 1 and the only run held on
// a paused server, maxCoalesced+5 calls make a second run of maxCoalesced
// while the last 5 wait; once resumed, every call is decided, in three
// script runs.
func TestCoalesceFullRun(t *testing.T) {
	addr := standaloneAddr(t)
	s, _ := testStore(t, addr, &Options{Coalesce: 1})
	l := limitOf(floodgate.FixedWindow, 1000, time.Hour)
	if _, err := s.Apply(t.Context(), request("warm", l, t0)); err != nil {
		t.Fatal(err)
	}
	admin := newRueidis(t, addr)
	loadMulti(t, admin)
	before := scriptCalls(t, admin)
	first, unpause := holdRun(t, s, admin, "first", l)
	const n = maxCoalesced + 5
	out := make(chan error, n)
	for i := range n {
		go func() {
			d, err := s.Apply(t.Context(), request(fmt.Sprint("k", i%7), l, t0))
			if err == nil && !d.Allowed {
				err = fmt.Errorf("denied: %+v", d)
			}
			out <- err
		}()
	}
	waitQueued(t, s, n-maxCoalesced)
	waitInflight(t, s, 2)
	unpause()
	if res := <-first; res.err != nil {
		t.Fatal(res.err)
	}
	for range n {
		if err := <-out; err != nil {
			t.Error(err)
		}
	}
	if st := s.CoalesceStats(); st.Runs != 2 || st.Decisions != n {
		t.Errorf("%+v, want two shared runs of %d requests in all", st, n)
	}
	if got := scriptCalls(t, admin) - before; got != 3 {
		t.Errorf("%d scripts ran, want 3: the first call, a full run, the rest", got)
	}
}

// TestCoalesceDropsExpired checks that a call whose context ends while it
// waits for a run is never sent: it returns its context's error at its
// deadline, and Redis never counts it.
func TestCoalesceDropsExpired(t *testing.T) {
	addr := standaloneAddr(t)
	s, _ := testStore(t, addr, &Options{Coalesce: 1})
	l := limitOf(floodgate.FixedWindow, 100, time.Hour)
	if _, err := s.Apply(t.Context(), request("warm", l, t0)); err != nil {
		t.Fatal(err)
	}
	admin := newRueidis(t, addr)
	first, unpause := holdRun(t, s, admin, "k", l)
	const waiting = 5
	const deadline = 50 * time.Millisecond
	errs := make(chan error, waiting)
	for range waiting {
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			start := time.Now()
			_, err := s.Apply(ctx, request("k", l, t0))
			if late := time.Since(start) - deadline; late > time.Second {
				err = fmt.Errorf("returned %v after its deadline: %w", late, err)
			}
			errs <- err
		}()
	}
	for range waiting {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call that waited past its deadline: %v, want DeadlineExceeded", err)
		}
	}
	before := scriptCalls(t, admin)
	unpause()
	if res := <-first; res.err != nil {
		t.Fatal(res.err)
	}
	if queued(s) != 0 {
		t.Errorf("%d calls still queued", queued(s))
	}
	d, err := s.Apply(t.Context(), floodgate.Request{Key: "k", Limit: l, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if used := d.Limit - d.Remaining; used != 1 {
		t.Errorf("Redis counted %d, want 1: calls that expired while queued were sent", used)
	}
	// The first call and the peek: no run for the expired calls.
	if n := scriptCalls(t, admin) - before; n != 2 {
		t.Errorf("%d scripts ran after the pause, want 2", n)
	}
}

// TestCoalesceRunOutOfMemory makes one run of three requests on one key
// while Redis is out of memory (maxmemory 1, noeviction): the run reads the
// key once and would write it once, the write fails, so every request of
// the key fails with Redis's OOM error and the key keeps its count.
func TestCoalesceRunOutOfMemory(t *testing.T) {
	addr := standaloneAddr(t)
	s, _ := testStore(t, addr, &Options{Coalesce: 1})
	l := limitOf(floodgate.FixedWindow, 10, time.Hour)
	if _, err := s.Apply(t.Context(), request("a", l, t0)); err != nil {
		t.Fatal(err)
	}
	admin := newRueidis(t, addr)
	first, unpause := holdRun(t, s, admin, "first", l)
	errs := make(chan error, 4)
	go func() { errs <- (<-first).err }()
	for range 3 {
		go func() {
			_, err := s.Apply(t.Context(), request("a", l, t0))
			errs <- err
		}()
	}
	waitQueued(t, s, 3)
	setMaxmemory := func(v string) {
		t.Helper()
		if err := admin.Do(context.Background(), admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", v).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Do(t.Context(), admin.B().ConfigSet().ParameterValue().ParameterValue("maxmemory-policy", "noeviction").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	setMaxmemory("1")
	t.Cleanup(func() { setMaxmemory("0") })
	unpause()
	for range 4 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Errorf("a request under maxmemory 1: %v, want Redis's OOM error", err)
		}
	}
	if st := s.CoalesceStats(); st.Runs != 1 || st.Decisions != 3 {
		t.Errorf("%+v, want one shared run of the 3 requests", st)
	}
	setMaxmemory("0")
	d, err := s.Apply(t.Context(), floodgate.Request{Key: "a", Limit: l, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if used := d.Limit - d.Remaining; used != 1 {
		t.Errorf("the key counts %d after the failed run, want the 1 from before", used)
	}
}

// holdRun makes the only run of s (Coalesce 1) wait, so that the next
// calls queue: it loads the multi script, holds the server's scripts
// (pauseWrites), starts a call on key under l, and waits until that call
// is out. It returns the first call's outcome and the func that resumes
// the server.
func holdRun(t *testing.T, s *Store, admin rueidis.Client, key string, l floodgate.Limit) (<-chan result, func()) {
	t.Helper()
	loadMulti(t, admin)
	unpause := pauseWrites(t, admin)
	first := make(chan result, 1)
	go func() {
		d, err := s.Apply(t.Context(), request(key, l, t0))
		first <- result{d, err}
	}()
	waitInflight(t, s, 1)
	return first, unpause
}

// waitInflight waits, bounded, until n runs of s's group are out.
func waitInflight(t *testing.T, s *Store, n int) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for {
		s.co.mu.Lock()
		inflight := s.co.all.inflight
		s.co.mu.Unlock()
		if inflight == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%d runs out after 10s, want %d", inflight, n)
		}
		time.Sleep(time.Millisecond) // polling a condition, bounded above
	}
}
