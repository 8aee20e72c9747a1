package floodgate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

func TestShare(t *testing.T) {
	tests := []struct {
		name      string
		limit     floodgate.Limit
		instances int
		want      floodgate.Limit
	}{
		{"one instance keeps the limit", floodgate.Limit{Limit: 10, Period: time.Minute}, 1, floodgate.Limit{Limit: 10, Period: time.Minute}},
		{"rounded down", floodgate.Limit{Limit: 100, Period: time.Minute}, 3, floodgate.Limit{Limit: 33, Period: time.Minute}},
		{"at least 1", floodgate.Limit{Limit: 2, Period: time.Minute}, 5, floodgate.Limit{Limit: 1, Period: time.Minute}},
		{"0 stays 0", floodgate.Limit{Limit: 0, Period: time.Minute}, 5, floodgate.Limit{Limit: 0, Period: time.Minute}},
		{"burst divided too", floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 10, Burst: 25, Period: time.Second}, 4,
			floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 2, Burst: 6, Period: time.Second}},
		{"burst 0 stays 0 (the share's limit)", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}, 4,
			floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 2, Period: time.Second}},
		{"concurrency", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 9, Period: time.Minute}, 2,
			floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 4, Period: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := floodgate.Share(tt.limit, tt.instances); got != tt.want {
				t.Errorf("Share(%v, %d) = %v, want %v", tt.limit, tt.instances, got, tt.want)
			}
		})
	}
}

func TestFailLocalOptions(t *testing.T) {
	local := memstore.New(&memstore.Options{SweepInterval: -1})
	defer local.Close()
	tests := []struct {
		name string
		opts floodgate.Options
		want []string // substrings of the error; nil for none
	}{
		{"valid", floodgate.Options{FailurePolicy: floodgate.FailLocal, Local: local, Instances: 3}, nil},
		{"no local store", floodgate.Options{FailurePolicy: floodgate.FailLocal, Instances: 3}, []string{"Local:"}},
		{"no instances", floodgate.Options{FailurePolicy: floodgate.FailLocal, Local: local}, []string{"Instances: 0"}},
		{"both missing", floodgate.Options{FailurePolicy: floodgate.FailLocal, Instances: -1}, []string{"Local:", "Instances: -1"}},
		{"negative probe", floodgate.Options{FailurePolicy: floodgate.FailLocal, Local: local, Instances: 1, ProbeInterval: -time.Second}, []string{"ProbeInterval: negative"}},
		{"local options without local store", floodgate.Options{FailurePolicy: floodgate.FailOpen, Instances: 3}, []string{"Local:"}},
		// Local and Instances make FailLocal available to the items of
		// Decide that ask for it, whatever the default policy.
		{"local store under another default", floodgate.Options{FailurePolicy: floodgate.FailOpen, Local: local, Instances: 3}, nil},
		{"unknown policy", floodgate.Options{FailurePolicy: "fail_local"}, []string{`"fail_local"`, "fail_open, fail_closed or local"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := floodgate.New(local, &tt.opts)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// events records what an Observer sees.
type events struct {
	mu sync.Mutex
	ev []floodgate.Event
}

func (e *events) Observe(ev floodgate.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = append(e.ev, ev)
}

// take returns the events since the last take.
func (e *events) take() []floodgate.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := e.ev
	e.ev = nil
	return ev
}

// localFleet is instances Limiters under FailLocal sharing one Redis, each
// with its own memory store, all on one fake clock.
type localFleet struct {
	srv      *redistest.Server
	clock    *floodgatetest.FakeClock
	limiters []*floodgate.Limiter
	obs      []*events
}

const (
	fleetTimeout = time.Second      // generous: a loaded CI machine must not time out with Redis up
	fleetProbe   = 10 * time.Minute // by the fake clock
)

func newLocalFleet(t *testing.T, instances int) *localFleet {
	t.Helper()
	f := &localFleet{srv: redistest.Standalone(t), clock: floodgatetest.NewFakeClock(start)}
	for range instances {
		shared, err := redisstore.Open(t.Context(), "redis://"+f.srv.Addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { shared.Close() })
		local := memstore.New(&memstore.Options{SweepInterval: -1, Clock: f.clock})
		t.Cleanup(func() { local.Close() })
		obs := &events{}
		l, err := floodgate.New(shared, &floodgate.Options{
			Clock: f.clock, FailurePolicy: floodgate.FailLocal, Local: local, Instances: instances,
			ProbeInterval: fleetProbe, Timeout: fleetTimeout, Observer: obs,
		})
		if err != nil {
			t.Fatal(err)
		}
		f.limiters = append(f.limiters, l)
		f.obs = append(f.obs, obs)
	}
	return f
}

// dbsize is the number of keys in Redis.
func (f *localFleet) dbsize(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	out, err := f.srv.CLI(ctx, "DBSIZE")
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return out
}

// take makes n calls of cost 1 on instance i and returns the decisions,
// failing the test on an error or on a call slower than the store deadline.
func (f *localFleet) take(t *testing.T, i int, key string, limit floodgate.Limit, n int) []floodgate.Decision {
	t.Helper()
	ds := make([]floodgate.Decision, n)
	for j := range ds {
		begin := time.Now()
		var err error
		if limit.Algorithm == floodgate.Concurrency {
			_, ds[j], err = f.limiters[i].Acquire(t.Context(), key, limit)
		} else {
			ds[j], err = f.limiters[i].Allow(t.Context(), key, limit)
		}
		if err != nil {
			t.Fatalf("instance %d, call %d: %v", i, j, err)
		}
		// The store deadline plus room for a loaded machine: a call never
		// waits for a dead store longer than its deadline.
		if took := time.Since(begin); took > fleetTimeout+time.Second {
			t.Fatalf("instance %d, call %d took %v, past the %v deadline", i, j, took, fleetTimeout)
		}
	}
	return ds
}

func admitted(ds []floodgate.Decision) (n int) {
	for _, d := range ds {
		if d.Allowed {
			n++
		}
	}
	return n
}

func fallbacks(ds []floodgate.Decision) (n int) {
	for _, d := range ds {
		if d.Fallback {
			n++
		}
	}
	return n
}

// storeErrors returns the store errors of ev.
func storeErrors(ev []floodgate.Event) (errs []error) {
	for _, e := range ev {
		if e.Err != nil {
			errs = append(errs, e.Err)
		}
	}
	return errs
}

// storeFailures counts the events whose call asked the store and it failed.
func storeFailures(ev []floodgate.Event) (n int) {
	for _, e := range ev {
		if e.Err != nil {
			n++
		}
	}
	return n
}

// TestFailLocalHandover kills Redis under a fleet of three instances and
// restarts it: every algorithm's decisions move to the local stores, each
// admitting its share (limit/3) per window, without a call waiting on the
// dead store once the breaker is open, and move back to Redis once a probe
// finds it again.
func TestFailLocalHandover(t *testing.T) {
	const instances, limit, share = 3, 10, 3
	f := newLocalFleet(t, instances)
	limits := map[floodgate.Algorithm]floodgate.Limit{}
	for _, alg := range floodgate.Algorithms {
		limits[alg] = floodgate.Limit{Algorithm: alg, Limit: limit, Period: time.Minute}
	}
	key := func(alg floodgate.Algorithm) string { return "user:" + string(alg) }

	// Redis up: instance 0 takes 4 of each limit from the shared budget.
	for _, alg := range floodgate.Algorithms {
		ds := f.take(t, 0, key(alg), limits[alg], 4)
		if got := admitted(ds); got != 4 || fallbacks(ds) != 0 {
			t.Fatalf("%s with Redis up: %d admitted, %d local, want 4 and 0", alg, got, fallbacks(ds))
		}
		if got := ds[3].Remaining; got != limit-4 {
			t.Errorf("%s with Redis up: remaining %d, want %d", alg, got, limit-4)
		}
	}
	if got := f.dbsize(t); got == "0" {
		t.Fatalf("DBSIZE = %s with Redis up, want keys", got)
	}
	f.obs[0].take()

	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}

	// Redis down: each instance admits exactly its share of each limit at
	// this instant, whatever Redis held; only its first call asks Redis.
	for i := range f.limiters {
		for _, alg := range floodgate.Algorithms {
			ds := f.take(t, i, key(alg), limits[alg], limit)
			if got := admitted(ds); got != share {
				t.Errorf("instance %d, %s with Redis down: %d admitted, want its share %d", i, alg, got, share)
			}
			if got := fallbacks(ds); got != limit {
				t.Errorf("instance %d, %s with Redis down: %d of %d decisions local", i, alg, got, limit)
			}
			if got := ds[0].Limit; got != share {
				t.Errorf("instance %d, %s with Redis down: Decision.Limit %d, want the share %d", i, alg, got, share)
			}
		}
		if got := storeFailures(f.obs[i].take()); got != 1 {
			t.Errorf("instance %d asked the dead store %d times, want once (then the breaker is open)", i, got)
		}
	}

	// Next window, Redis still down, breaker still open: the share again,
	// for the windowed algorithms; nobody asks Redis.
	f.clock.Advance(time.Minute)
	for i := range f.limiters {
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowLog, floodgate.TokenBucket, floodgate.GCRA} {
			if got := admitted(f.take(t, i, key(alg), limits[alg], limit)); got != share {
				t.Errorf("instance %d, %s, next window: %d admitted, want %d", i, alg, got, share)
			}
		}
		if got := storeFailures(f.obs[i].take()); got != 0 {
			t.Errorf("instance %d asked the dead store %d times with the breaker open", i, got)
		}
	}

	// Past the probe interval with Redis still down, many concurrent calls:
	// exactly one probes Redis (and waits up to the deadline), the others
	// decide locally at once.
	f.clock.Advance(fleetProbe)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			begin := time.Now()
			d, err := f.limiters[0].Allow(t.Context(), "concurrent", limits[floodgate.FixedWindow])
			if took := time.Since(begin); err != nil || !d.Fallback || took > fleetTimeout+time.Second {
				t.Errorf("concurrent call past the probe interval: %+v, %v after %v", d, err, took)
			}
		})
	}
	wg.Wait()
	if got := storeFailures(f.obs[0].take()); got != 1 {
		t.Errorf("%d of 8 concurrent calls asked Redis past the probe interval, want 1", got)
	}

	if err := f.srv.Restart(t); err != nil {
		t.Fatal(err)
	}
	// Breaker open: still local, Redis untouched.
	if ds := f.take(t, 0, key(floodgate.FixedWindow), limits[floodgate.FixedWindow], 1); !ds[0].Fallback {
		t.Error("decision with the breaker open came from Redis")
	}
	if got := f.dbsize(t); got != "0" {
		t.Errorf("DBSIZE = %s with the breaker open after the restart, want 0", got)
	}

	// Past the interval, a probe finds Redis again. The client may need a
	// failed call or two to reconnect, and it has several connections,
	// each of which learns of the restart only when next used: a call on
	// one not yet redialled fails and opens the breaker again. So each
	// instance probes until 8 calls in a row were decided by Redis
	// (bounded), as a fleet under load would within its first calls.
	// Redis restarted empty, so its counts start over at the full limit.
	f.clock.Advance(time.Minute) // a fresh window for every algorithm
	for i := range f.limiters {
		for probe, inRow := 0, 0; inRow < 8; probe++ {
			f.clock.Advance(fleetProbe)
			if d := f.take(t, i, "probe", limits[floodgate.FixedWindow], 1)[0]; d.Fallback {
				inRow = 0
			} else {
				inRow++
			}
			if probe == 60 {
				t.Fatalf("instance %d: not 8 Redis decisions in a row after %d probes with Redis back; store errors: %v", i, probe, storeErrors(f.obs[i].take()))
			}
		}
		f.obs[i].take()
	}
	for i := range f.limiters {
		for _, alg := range floodgate.Algorithms {
			ds := f.take(t, i, key(alg), limits[alg], 2)
			if fallbacks(ds) != 0 {
				t.Fatalf("instance %d, %s: local decision after the breaker closed; store errors: %v", i, alg, storeErrors(f.obs[i].take()))
			}
			if want := int64(limit - 2*(i+1)); ds[1].Remaining != want || ds[1].Limit != limit {
				t.Errorf("instance %d, %s back on Redis: limit %d remaining %d, want %d and %d (the shared count)", i, alg, ds[1].Limit, ds[1].Remaining, limit, want)
			}
		}
	}
	if got := f.dbsize(t); got == "0" {
		t.Errorf("DBSIZE = 0 after the fleet is back on Redis")
	}
}

// TestFailLocalPausedRedis pauses Redis (SIGSTOP), so calls time out
// rather than fail at once: the first call waits for the deadline, the
// next ones decide locally without waiting.
func TestFailLocalPausedRedis(t *testing.T) {
	f := newLocalFleet(t, 2)
	lim := floodgate.Limit{Limit: 4, Period: time.Minute}
	if ds := f.take(t, 0, "k", lim, 1); ds[0].Fallback {
		t.Fatal("local decision with Redis up")
	}
	if err := f.srv.Pause(); err != nil {
		t.Fatal(err)
	}
	defer f.srv.Resume()
	begin := time.Now()
	d, err := f.limiters[0].Allow(t.Context(), "k", lim)
	if took := time.Since(begin); err != nil || !d.Fallback || !d.Allowed || took < fleetTimeout {
		t.Fatalf("first call with Redis paused: %+v, %v after %v; want a local admission after the %v deadline", d, err, took, fleetTimeout)
	}
	ev := f.obs[0].take()
	if len(ev) == 0 || ev[len(ev)-1].Err == nil || !ev[len(ev)-1].Decision.Fallback {
		t.Errorf("Observer saw %+v for the call that timed out, want its store error and a local decision", ev)
	}
	for j := range 5 {
		begin := time.Now()
		d, err := f.limiters[0].Allow(t.Context(), "k", lim)
		if took := time.Since(begin); err != nil || !d.Fallback || took >= fleetTimeout {
			t.Fatalf("call %d with the breaker open: %+v, %v after %v; want a local decision before the deadline", j, d, err, took)
		}
	}
}

// TestFailLocalAllowEach checks several limits at once with Redis down:
// the local store decides them all or nothing, each with its share.
func TestFailLocalAllowEach(t *testing.T) {
	f := newLocalFleet(t, 2)
	l := f.limiters[0]
	perMinute := floodgate.Limit{Limit: 10, Period: time.Minute} // share 5
	perSecond := floodgate.Limit{Limit: 4, Period: time.Second}  // share 2
	if d, _, err := l.AllowEach(t.Context(), "k", 1, perMinute, perSecond); err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("with Redis up: %+v, %v", d, err)
	}
	if err := f.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// Three seconds of 3 calls each: 2, 2, then 1 (the minute's share of 5
	// is spent), and a denial by one limit takes nothing from the other.
	var admittedPerSecond []int
	var last []floodgate.Decision
	for range 3 {
		n := 0
		for range 3 {
			d, ds, err := l.AllowEach(t.Context(), "k", 1, perMinute, perSecond)
			if err != nil || !d.Fallback || len(ds) != 2 || !ds[0].Fallback || !ds[1].Fallback {
				t.Fatalf("with Redis down: %+v %+v, %v; want local decisions", d, ds, err)
			}
			if d.Allowed {
				n++
			}
			last = ds
		}
		admittedPerSecond = append(admittedPerSecond, n)
		f.clock.Advance(time.Second)
	}
	if got := admittedPerSecond; got[0] != 2 || got[1] != 2 || got[2] != 1 {
		t.Errorf("admitted per second %v, want [2 2 1] (shares 2/s and 5/min)", got)
	}
	if got := last[1].Remaining; got != 1 {
		t.Errorf("per-second remaining after a denial by the minute %d, want 1 (nothing taken)", got)
	}
}
