package floodgatetest

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// A tcase is a step table: requests on one key, each with the decision the
// algorithm package doc says it gets. The values were worked out by hand
// from that doc, not by running the algorithms.
type tcase struct {
	name   string
	limits []floodgate.Limit // steps use limits[0] unless they say
	steps  []step
}

// A step is one request at offset at into the case.
type step struct {
	at      time.Duration
	cost    int64
	want    want
	limit   int // index into tcase.limits
	lease   string
	release bool
}

func st(at time.Duration, cost int64, w want) step { return step{at: at, cost: cost, want: w} }

// on is s made under the case's i-th limit.
func on(i int, s step) step { s.limit = i; return s }

// acquire takes (or renews) cost units under lease.
func acquire(at time.Duration, lease string, cost int64, w want) step {
	return step{at: at, cost: cost, want: w, lease: lease}
}

// release gives back units 0..cost-1 of lease.
func release(at time.Duration, lease string, cost int64, w want) step {
	return step{at: at, cost: cost, want: w, lease: lease, release: true}
}

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

func lim(alg floodgate.Algorithm, limit int64, period time.Duration) floodgate.Limit {
	return floodgate.Limit{Algorithm: alg, Limit: limit, Period: period}
}

func with(l floodgate.Limit, f func(*floodgate.Limit)) floodgate.Limit { f(&l); return l }

func firstHit(l *floodgate.Limit)      { l.Window = floodgate.FirstHit }
func countRejected(l *floodgate.Limit) { l.CountRejected = true }
func burst(b int64) func(*floodgate.Limit) {
	return func(l *floodgate.Limit) { l.Burst = b }
}

func fixedWindowCases() []tcase {
	fw := func(limit int64, period time.Duration) floodgate.Limit {
		return lim(floodgate.FixedWindow, limit, period)
	}
	return []tcase{
		{"aligned", []floodgate.Limit{fw(3, sec)}, []step{
			st(0, 1, ok(2, sec)),
			st(100*ms, 1, ok(1, 900*ms)),
			st(200*ms, 1, ok(0, 800*ms)),
			st(300*ms, 1, no(0, 700*ms, 700*ms)),
			st(300*ms, 0, ok(0, 700*ms)), // a full window still admits a peek
			st(999_999*us, 1, no(0, us, us)),
			st(sec, 1, ok(2, sec)), // the next window
		}},
		{"aligned_mid_window", []floodgate.Limit{fw(3, sec)}, []step{
			st(900*ms, 2, ok(1, 100*ms)), // the window is [0s, 1s), not [0.9s, 1.9s)
			st(950*ms, 2, no(1, 50*ms, 50*ms)),
			st(sec, 2, ok(1, sec)),
			st(1900*ms, 2, no(1, 100*ms, 100*ms)),
		}},
		{"first_hit", []floodgate.Limit{with(fw(3, sec), firstHit)}, []step{
			st(900*ms, 2, ok(1, sec)), // the window is [0.9s, 1.9s)
			st(sec, 2, no(1, 900*ms, 900*ms)),
			st(1_899_999*us, 1, ok(0, us)),
			st(1900*ms, 3, ok(0, sec)),
			st(2500*ms, 1, no(0, 400*ms, 400*ms)),
			st(2900*ms, 0, ok(3, 0)),   // a peek starts no window
			st(3200*ms, 1, ok(2, sec)), // this does: [3.2s, 4.2s)
			st(4199*ms, 2, ok(0, ms)),  // still in it
			st(4200*ms, 3, ok(0, sec)), // not any more
			st(4200*ms, 1, no(0, sec, sec)),
		}},
		{"cost", []floodgate.Limit{fw(10, time.Minute)}, []step{
			st(0, 4, ok(6, time.Minute)),
			st(0, 0, ok(6, time.Minute)),
			st(0, 7, no(6, time.Minute, time.Minute)),
			st(0, 6, ok(0, time.Minute)),
			st(0, 0, ok(0, time.Minute)),
			st(0, 11, no(0, time.Minute, floodgate.Never)),
		}},
		{"above_capacity_on_empty_key", []floodgate.Limit{fw(5, sec)}, []step{
			st(0, 6, no(5, 0, floodgate.Never)),
			st(0, 0, ok(5, 0)),
			st(0, 5, ok(0, sec)),
		}},
		{"limit_0", []floodgate.Limit{fw(0, sec)}, []step{
			st(0, 0, ok(0, 0)),
			st(0, 1, no(0, 0, floodgate.Never)),
		}},
		{"count_rejected_off", []floodgate.Limit{fw(3, sec)}, []step{
			st(0, 1, ok(2, sec)),
			st(0, 3, no(2, sec, sec)),
			st(0, 2, ok(0, sec)),
			st(0, 1, no(0, sec, sec)),
			st(0, 0, ok(0, sec)),
		}},
		{"count_rejected_on", []floodgate.Limit{with(fw(3, sec), countRejected)}, []step{
			st(0, 1, ok(2, sec)),
			st(0, 3, no(0, sec, sec)), // counted: 4 of 3
			st(0, 2, no(0, sec, sec)),
			st(0, 0, no(0, sec, sec)), // over the limit, even a peek is denied
		}},
		{"count_rejected_next_window", []floodgate.Limit{with(fw(3, sec), countRejected)}, []step{
			st(0, 4, no(0, sec, floodgate.Never)), // counted even though it never fits
			st(500*ms, 1, no(0, 500*ms, 500*ms)),
			st(sec, 1, ok(2, sec)),
		}},
	}
}

func slidingWindowCases() []tcase {
	sw := func(limit int64, period time.Duration) floodgate.Limit {
		return lim(floodgate.SlidingWindow, limit, period)
	}
	return []tcase{
		{"weighted", []floodgate.Limit{sw(4, sec)}, []step{
			st(0, 2, ok(2, 2*sec)),
			st(500*ms, 2, ok(0, 1500*ms)),
			// The previous window must weigh 4*(1-e) <= 3: e >= 0.25s.
			st(600*ms, 1, no(0, 1400*ms, 650*ms)),
			st(sec, 1, no(0, sec, 250*ms)),
			st(1_249_999*us, 1, no(0, 750_001*us, us)), // 4*0.750001 = 3.000004, +1 > 4
			st(1250*ms, 1, ok(0, 1750*ms)),             // 4*0.75 = 3, +1
			st(1500*ms, 0, ok(1, 1500*ms)),             // 4*0.5 = 2, +1
			st(1750*ms, 1, ok(1, 1250*ms)),             // 4*0.25 = 1, +2
			st(2500*ms, 4, no(3, 500*ms, 500*ms)),      // 2*0.5 = 1; fits only once prev has left
			st(3*sec, 4, ok(0, 2*sec)),                 // both earlier windows left
		}},
		{"cost", []floodgate.Limit{sw(5, sec)}, []step{
			st(0, 5, ok(0, 2*sec)),
			st(0, 0, ok(0, 2*sec)),
			// 5*(1-e) <= 4: e >= 0.2s into the next window.
			st(0, 1, no(0, 2*sec, 1200*ms)),
			st(0, 6, no(0, 2*sec, floodgate.Never)),
		}},
		{"above_capacity_on_empty_key", []floodgate.Limit{sw(5, sec)}, []step{
			st(0, 6, no(5, 0, floodgate.Never)),
			st(0, 0, ok(5, 0)),
		}},
		{"limit_0", []floodgate.Limit{sw(0, sec)}, []step{
			st(0, 0, ok(0, 0)),
			st(0, 1, no(0, 0, floodgate.Never)),
		}},
		{"count_rejected_off", []floodgate.Limit{sw(3, sec)}, []step{
			st(0, 2, ok(1, 2*sec)),
			// 2*(1-e) <= 1: e >= 0.5s into the next window.
			st(0, 2, no(1, 2*sec, 1500*ms)),
			st(0, 1, ok(0, 2*sec)),
		}},
		{"count_rejected_on", []floodgate.Limit{with(sw(3, sec), countRejected)}, []step{
			st(0, 2, ok(1, 2*sec)),
			// Counted up to the limit (3), so 2 fits only when
			// 3*(1-e) <= 1: e >= 0.666667s into the next window.
			st(0, 2, no(0, 2*sec, 1_666_667*us)),
			st(0, 0, ok(0, 2*sec)),
			// 3*(1-e) <= 2: e >= 0.333334s.
			st(0, 1, no(0, 2*sec, 1_333_334*us)),
		}},
	}
}

func slidingLogCases() []tcase {
	sl := func(limit int64, period time.Duration) floodgate.Limit {
		return lim(floodgate.SlidingWindowLog, limit, period)
	}
	return []tcase{
		{"trailing", []floodgate.Limit{sl(3, sec)}, []step{
			st(0, 1, ok(2, sec)),
			st(400*ms, 2, ok(0, sec)),
			st(500*ms, 1, no(0, 900*ms, 500*ms)), // the entry at 0 leaves at 1s
			st(500*ms, 2, no(0, 900*ms, 900*ms)), // the two at 0.4s leave at 1.4s
			st(sec, 1, ok(0, sec)),               // an entry at exactly now-Period is out
			st(1400*ms, 0, ok(2, 600*ms)),
			st(1400*ms, 3, no(2, 600*ms, 600*ms)),
			st(1400*ms, 4, no(2, 600*ms, floodgate.Never)),
			st(2*sec, 3, ok(0, sec)),
		}},
		{"cost", []floodgate.Limit{sl(5, sec)}, []step{
			st(0, 3, ok(2, sec)),
			st(0, 3, no(2, sec, sec)),
			st(0, 0, ok(2, sec)),
			st(0, 2, ok(0, sec)),
			st(0, 6, no(0, sec, floodgate.Never)),
		}},
		{"above_capacity_on_empty_key", []floodgate.Limit{sl(5, sec)}, []step{
			st(0, 6, no(5, 0, floodgate.Never)),
			st(0, 0, ok(5, 0)),
		}},
		{"limit_0", []floodgate.Limit{sl(0, sec)}, []step{
			st(0, 0, ok(0, 0)),
			st(0, 1, no(0, 0, floodgate.Never)),
		}},
	}
}

// bucketCases hold for TokenBucket and GCRA alike: the algorithm doc says
// they admit the same and report the same.
func bucketCases(alg floodgate.Algorithm) []tcase {
	b := func(limit int64, period time.Duration) floodgate.Limit { return lim(alg, limit, period) }
	return []tcase{
		{"refill", []floodgate.Limit{b(2, sec)}, []step{ // a token every 500ms, burst 2
			st(0, 1, ok(1, 500*ms)),
			st(0, 1, ok(0, sec)),
			st(0, 1, no(0, sec, 500*ms)),
			st(499_999*us, 1, no(0, 500_001*us, us)),
			st(500*ms, 1, ok(0, sec)),
			st(2*sec, 0, ok(2, 0)),
			st(2*sec, 2, ok(0, sec)),
			st(2750*ms, 2, no(1, 250*ms, 250*ms)),
		}},
		{"burst_above_limit", []floodgate.Limit{with(b(1, sec), burst(3))}, []step{
			st(0, 3, ok(0, 3*sec)),
			st(0, 1, no(0, 3*sec, sec)),
			st(sec, 1, ok(0, 3*sec)),
			st(2500*ms, 0, ok(1, 1500*ms)),
			st(2500*ms, 2, no(1, 1500*ms, 500*ms)),
			st(2500*ms, 4, no(1, 1500*ms, floodgate.Never)),
			st(10*sec, 3, ok(0, 3*sec)),
		}},
		{"burst_below_limit", []floodgate.Limit{with(b(10, sec), burst(2))}, []step{
			st(0, 2, ok(0, 200*ms)),
			st(0, 1, no(0, 200*ms, 100*ms)),
			st(100*ms, 1, ok(0, 200*ms)),
			st(150*ms, 3, no(0, 150*ms, floodgate.Never)),
		}},
		{"fractional_interval", []floodgate.Limit{b(3, sec)}, []step{ // a token every 333333 1/3 µs
			st(0, 3, ok(0, sec)),
			st(0, 1, no(0, sec, 333_334*us)),
			st(333_333*us, 1, no(0, 666_667*us, us)),
			st(333_334*us, 1, ok(0, sec)), // full at 1333333 1/3 µs, rounded up
			st(3*sec, 0, ok(3, 0)),
		}},
		{"cost", []floodgate.Limit{b(5, sec)}, []step{ // a token every 200ms
			st(0, 2, ok(3, 400*ms)),
			st(0, 0, ok(3, 400*ms)),
			st(0, 4, no(3, 400*ms, 200*ms)),
			st(0, 3, ok(0, sec)),
			st(0, 6, no(0, sec, floodgate.Never)),
		}},
		{"above_capacity_on_empty_key", []floodgate.Limit{with(b(5, sec), burst(2))}, []step{
			st(0, 3, no(2, 0, floodgate.Never)),
			st(0, 0, ok(2, 0)),
		}},
		{"limit_0", []floodgate.Limit{b(0, sec)}, []step{
			st(0, 0, ok(0, 0)),
			st(0, 1, no(0, 0, floodgate.Never)),
		}},
	}
}

func concurrencyCases() []tcase {
	c := func(limit int64, ttl time.Duration) floodgate.Limit { return lim(floodgate.Concurrency, limit, ttl) }
	return []tcase{
		{"leases", []floodgate.Limit{c(2, 10*sec)}, []step{
			acquire(0, "a", 1, ok(1, 10*sec)),
			acquire(sec, "b", 1, ok(0, 10*sec)),
			acquire(2*sec, "c", 1, no(0, 9*sec, 8*sec)), // a expires at 10s
			acquire(3*sec, "a", 1, ok(0, 10*sec)),       // renewed until 13s
			release(4*sec, "b", 1, ok(1, 9*sec)),
			acquire(4*sec, "c", 1, ok(0, 10*sec)),                 // until 14s
			acquire(5*sec, "d", 2, no(0, 9*sec, 9*sec)),           // a and c must both expire
			acquire(5*sec, "d", 3, no(0, 9*sec, floodgate.Never)), // more than the limit
			st(13*sec, 0, ok(1, sec)),                             // a expired, a peek needs no lease
			acquire(13*sec, "a", 1, ok(0, 10*sec)),                // an expired lease is taken anew
			acquire(13*sec, "b", 1, no(0, 10*sec, sec)),
			acquire(14*sec, "b", 1, ok(0, 10*sec)),
			release(14*sec, "x", 1, ok(0, 10*sec)), // an unknown lease: nothing to give back
			st(24*sec, 0, ok(2, 0)),
		}},
		{"renew_after_expiry", []floodgate.Limit{c(1, 10*sec)}, []step{
			acquire(0, "a", 1, ok(0, 10*sec)),
			acquire(10*sec, "b", 1, ok(0, 10*sec)),
			acquire(10*sec, "a", 1, no(0, 10*sec, 10*sec)),
		}},
		{"cost", []floodgate.Limit{c(3, 10*sec)}, []step{
			acquire(0, "a", 2, ok(1, 10*sec)),
			acquire(0, "b", 2, no(1, 10*sec, 10*sec)),
			acquire(0, "b", 1, ok(0, 10*sec)),
			acquire(0, "a", 2, ok(0, 10*sec)), // renewing does not count the lease twice
			acquire(0, "c", 0, ok(0, 10*sec)), // a peek with a lease takes nothing
			release(0, "a", 1, ok(1, 10*sec)), // gives back unit 0 of a, keeps unit 1
			release(0, "a", 2, ok(2, 10*sec)),
			acquire(0, "c", 4, no(2, 10*sec, floodgate.Never)),
			release(0, "b", 1, ok(3, 0)),
		}},
		{"limit_0", []floodgate.Limit{c(0, 10*sec)}, []step{
			st(0, 0, ok(0, 0)),
			acquire(0, "a", 1, no(0, 0, floodgate.Never)),
		}},
	}
}

// stateCases check that state is kept per key, algorithm and period (see
// floodgate.Store).
func stateCases() []tcase {
	return []tcase{
		{"periods_apart", []floodgate.Limit{lim(floodgate.FixedWindow, 2, sec), lim(floodgate.FixedWindow, 2, time.Minute)}, []step{
			on(0, st(0, 2, ok(0, sec))),
			on(1, st(0, 0, ok(2, 0))),
			on(1, st(0, 1, ok(1, time.Minute))),
			on(0, st(0, 1, no(0, sec, sec))),
			on(1, st(0, 1, ok(0, time.Minute))),
			on(1, st(0, 1, no(0, time.Minute, time.Minute))),
		}},
		{"periods_apart_over_time", []floodgate.Limit{lim(floodgate.GCRA, 2, sec), lim(floodgate.GCRA, 2, time.Minute)}, []step{
			on(0, st(0, 2, ok(0, sec))),
			on(1, st(0, 2, ok(0, time.Minute))),
			on(0, st(sec, 2, ok(0, sec))),
			on(1, st(sec, 1, no(0, 59*sec, 29*sec))),
		}},
		{"algorithms_apart", []floodgate.Limit{
			lim(floodgate.FixedWindow, 2, sec), lim(floodgate.SlidingWindow, 2, sec),
			lim(floodgate.SlidingWindowLog, 2, sec), lim(floodgate.TokenBucket, 2, sec), lim(floodgate.GCRA, 2, sec),
			lim(floodgate.Concurrency, 2, sec),
		}, []step{
			on(0, st(0, 2, ok(0, sec))),
			on(1, st(0, 0, ok(2, 0))),
			on(2, st(0, 0, ok(2, 0))),
			on(3, st(0, 0, ok(2, 0))),
			on(4, st(0, 0, ok(2, 0))),
			on(5, st(0, 0, ok(2, 0))),
			on(4, st(0, 2, ok(0, sec))),
			on(3, st(0, 0, ok(2, 0))),
			on(1, st(0, 0, ok(2, 0))),
		}},
		// An empty Algorithm is FixedWindow and an empty Window is Aligned:
		// the same state as the limit that names them.
		{"defaults_share_state", []floodgate.Limit{
			{Limit: 2, Period: sec},
			{Algorithm: floodgate.FixedWindow, Limit: 2, Period: sec, Window: floodgate.Aligned},
		}, []step{
			on(0, st(0, 2, ok(0, sec))),
			on(1, st(0, 0, ok(0, sec))),
			on(1, st(0, 1, no(0, sec, sec))),
		}},
		// Limits that differ only in Limit share state: raising a limit
		// keeps the count.
		{"shared_by_limit", []floodgate.Limit{lim(floodgate.FixedWindow, 2, sec), lim(floodgate.FixedWindow, 5, sec)}, []step{
			on(0, st(0, 2, ok(0, sec))),
			on(1, st(0, 0, ok(3, sec))),
			on(1, st(0, 3, ok(0, sec))),
			on(0, st(0, 0, no(0, sec, sec))), // 5 of 2: over, even for a peek
		}},
	}
}

func (s *suite) testTables(t *testing.T) {
	t.Parallel()
	groups := []struct {
		name  string
		cases []tcase
	}{
		{string(floodgate.FixedWindow), fixedWindowCases()},
		{string(floodgate.SlidingWindow), slidingWindowCases()},
		{string(floodgate.SlidingWindowLog), slidingLogCases()},
		{string(floodgate.TokenBucket), bucketCases(floodgate.TokenBucket)},
		{string(floodgate.GCRA), bucketCases(floodgate.GCRA)},
		{string(floodgate.Concurrency), concurrencyCases()},
		{"state", stateCases()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					s.runCase(t, c)
				})
			}
		})
	}
}

// runCase runs the steps of c in order on a key of its own.
func (s *suite) runCase(t *testing.T, c tcase) {
	t.Helper()
	if s.opts.ServerTime {
		for _, st := range c.steps {
			if st.at != c.steps[0].at {
				t.Skip("the case moves time; it needs requests with Now (Options.ServerTime is set)")
			}
		}
	}
	key := s.key(t, "k")
	limits := make([]floodgate.Limit, len(c.limits))
	for i, l := range c.limits {
		limits[i] = s.limit(t, l)
	}
	for i, st := range c.steps {
		r := floodgate.Request{Key: key, Limit: limits[st.limit], Cost: st.cost, Now: s.at(st.at), Lease: st.lease, Release: st.release}
		got := s.apply(t, r)
		if msg := s.diff(got, st.want, r.Limit); msg != "" {
			t.Fatalf("step %d: Apply(%s):%s", i, describe(r), msg)
		}
	}
}

// testKeys checks that keys that differ in any byte never share state,
// whatever a store does to fit them in its own key space (escaping,
// hashing, hash tags).
func (s *suite) testKeys(t *testing.T) {
	t.Parallel()
	const dir = "keys/"
	long := make([]byte, floodgate.MaxKeyLen-len(s.prefix)-len(dir))
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	long2 := append([]byte(nil), long...)
	long2[len(long2)-1] = '!' // differs from long in the last byte only
	suffixes := []string{
		"k", "K", "k:", "k:0", ":k", "{k}", "{k", "k}", "}k{", "k%3A", "k\\:", "k\x00", "k\x00\x00",
		"k ", "k\n", "ключ", "k\xff", "k/..", "*", "k:v1:fixed_window:{k}",
		string(long), string(long2),
	}
	l := s.limit(t, lim(floodgate.FixedWindow, 100, time.Minute))
	keys := make([]string, len(suffixes))
	for i, suf := range suffixes {
		keys[i] = s.prefix + dir + suf
	}
	seen := map[string]bool{}
	for i, k := range keys {
		if seen[k] {
			t.Fatalf("floodgatetest: duplicate key %d", i)
		}
		seen[k] = true
		s.apply(t, floodgate.Request{Key: k, Limit: l, Cost: int64(i + 1), Now: s.at(0)})
	}
	for i, k := range keys {
		r := floodgate.Request{Key: k, Limit: l, Now: s.at(0)}
		got := s.apply(t, r)
		if want := 100 - int64(i+1); got.Remaining != want {
			t.Errorf("key %d (%s): Remaining = %d after taking %d of 100, want %d: keys share state", i, describe(r), got.Remaining, i+1, want)
		}
	}
}

// testReset checks Resetter: Reset gives the budget back for one key,
// algorithm and period, and nothing else.
func (s *suite) testReset(t *testing.T) {
	t.Parallel()
	rs, isResetter := s.store.(floodgate.Resetter)
	if !isResetter {
		t.Skip("the store is not a floodgate.Resetter")
	}
	key, other := s.key(t, "k"), s.key(t, "other")
	fw := s.limit(t, lim(floodgate.FixedWindow, 2, still))
	fw2 := s.limit(t, lim(floodgate.FixedWindow, 2, 2*still)) // another period
	g := s.limit(t, lim(floodgate.GCRA, 2, still))
	conc := s.limit(t, lim(floodgate.Concurrency, 2, still))
	log := s.limit(t, lim(floodgate.SlidingWindowLog, 2, still))
	take := func(key string, l floodgate.Limit) {
		t.Helper()
		r := floodgate.Request{Key: key, Limit: l, Cost: 2, Now: s.at(0)}
		if l.Algorithm == floodgate.Concurrency {
			r.Lease = "a"
		}
		if d := s.apply(t, r); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("Apply(%s) = %+v, want allowed with 0 remaining", describe(r), d)
		}
	}
	remaining := func(key string, l floodgate.Limit) int64 {
		t.Helper()
		return s.apply(t, floodgate.Request{Key: key, Limit: l, Now: s.at(0)}).Remaining
	}
	for _, l := range []floodgate.Limit{fw, fw2, g, conc, log} {
		take(key, l)
	}
	take(other, fw)
	if err := s.tryReset(t.Context(), rs, key, fw); err != nil {
		t.Fatalf("Reset(%q, %s): %v", key, fw, err)
	}
	if got := remaining(key, fw); got != 2 {
		t.Errorf("after Reset: Remaining = %d, want 2", got)
	}
	for _, l := range []floodgate.Limit{fw2, g, conc, log} {
		if got := remaining(key, l); got != 0 {
			t.Errorf("Reset(%s) changed %s of the same key: Remaining = %d, want 0", fw, l, got)
		}
	}
	if got := remaining(other, fw); got != 0 {
		t.Errorf("Reset of one key changed another: Remaining = %d, want 0", got)
	}
	for _, l := range []floodgate.Limit{g, conc, log} {
		if err := s.tryReset(t.Context(), rs, key, l); err != nil {
			t.Fatalf("Reset(%q, %s): %v", key, l, err)
		}
		if got := remaining(key, l); got != 2 {
			t.Errorf("after Reset(%s): Remaining = %d, want 2", l, got)
		}
	}
	if err := s.tryReset(t.Context(), rs, s.key(t, "never used"), fw); err != nil {
		t.Errorf("Reset of a key never used: %v, want nil", err)
	}
}
