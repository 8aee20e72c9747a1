package rlqs_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server/rlqs"
)

// The simulations' rule: 100 per 10 s as a token bucket of capacity 20,
// so L/P = 10 per second and B = 20.
const (
	simLimit  = 100
	simBurst  = 20
	simPeriod = 10 * time.Second
	simYAML   = `domain: edge
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {period: 10s, requests_per_unit: 100, algorithm: token_bucket, burst: 20}
  - key: tenant
    value: free
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: sliding_window, failure_mode: fail_closed}
  - key: tenant
    value: monthly
    rate_limit: {unit: month, requests_per_unit: 1000, time_zone: America/New_York, failure_mode: fail_closed}
`
)

var simBucketID = map[string]string{"route": "/api", "tenant": "acme"}

// simOptions are the service's options in the simulations: TTL 4 s,
// Grace 1 s, ChangeEvery 2 s, abandon after 10 s idle.
func simOptions(clock *fakeClock, home grant.Home) rlqs.Options {
	return rlqs.Options{Home: home, Clock: clock.Now, TTL: 4 * time.Second, Grace: time.Second,
		ChangeEvery: 2 * time.Second, Idle: 10 * time.Second}
}

// sim is a fleet of simulated Envoys driven step by step on one clock.
type sim struct {
	t      testing.TB
	clock  *fakeClock
	step   time.Duration
	envoys []*simEnvoy
	// admitted[s][i] is what Envoy i admitted in step s; rate[s] the sum
	// of the Envoys' active token bucket rates after step s.
	admitted [][]int64
	rate     []float64
	acc      []float64
}

// run drives the fleet for d: each step, every Envoy gets demand(i, t)
// requests per second (fractions carried over), then sends its report if
// it is due; at is called before each step with the time since the start.
func (s *sim) run(d time.Duration, demand func(i int, at time.Duration) float64, at func(at time.Duration)) {
	if s.acc == nil {
		s.acc = make([]float64, len(s.envoys))
	}
	start := len(s.admitted)
	for k := range int(d / s.step) {
		now := time.Duration(start+k) * s.step
		if at != nil {
			at(now)
		}
		s.clock.Advance(s.step)
		row := make([]int64, len(s.envoys))
		for i, e := range s.envoys {
			s.acc[i] += demand(i, now) * s.step.Seconds()
			for ; s.acc[i] >= 1; s.acc[i]-- {
				if e.request(simBucketID) {
					row[i]++
				}
			}
			e.tick()
		}
		s.admitted = append(s.admitted, row)
		var r float64
		tnow := s.clock.Now()
		for _, e := range s.envoys {
			for _, b := range e.buckets {
				r += e.activeRate(b, tnow)
			}
		}
		s.rate = append(s.rate, r)
	}
}

// fleet is the fleet's admissions per step.
func (s *sim) fleet() []int64 {
	out := make([]int64, len(s.admitted))
	for k, row := range s.admitted {
		for _, n := range row {
			out[k] += n
		}
	}
	return out
}

// bound is the package doc's bound: L·D/P + B·(1 + ⌈D/M⌉).
func bound(d, m time.Duration) float64 {
	return simLimit*d.Seconds()/simPeriod.Seconds() + simBurst*(1+math.Ceil(d.Seconds()/m.Seconds()))
}

// checkBound asserts the three parts of the bound on a run: the active
// rates never add up to more than L/P; the token buckets created in any
// span of ChangeEvery hold at most B; and the fleet admits at most the
// bound in every span of length P, 3P and 6P.
func checkBound(t *testing.T, s *sim, changeEvery time.Duration) {
	t.Helper()
	for k, r := range s.rate {
		if r < 0 || r > simLimit/simPeriod.Seconds()+1e-9 {
			t.Errorf("step %d (%v): the Envoys' active rates add up to %.3f per second, above L/P = %v", k, time.Duration(k)*s.step, r, simLimit/simPeriod.Seconds())
		}
	}
	var all []created
	for _, e := range s.envoys {
		all = append(all, e.created...)
	}
	for _, a := range all {
		var sum int64
		for _, b := range all {
			if !b.at.Before(a.at) && b.at.Sub(a.at) < changeEvery {
				sum += int64(b.maxTokens)
			}
		}
		if sum > simBurst {
			t.Errorf("token buckets created in %v from %v hold %d tokens, above B = %d", changeEvery, a.at, sum, simBurst)
		}
	}
	adm := s.fleet()
	for _, d := range []time.Duration{simPeriod, 3 * simPeriod, 6 * simPeriod} {
		w := int(d / s.step)
		limit := bound(d, changeEvery)
		var most int64
		for start := 0; start+w <= len(adm); start++ {
			var sum int64
			for _, n := range adm[start : start+w] {
				sum += n
			}
			most = max(most, sum)
		}
		t.Logf("most admitted in any %v: %d; bound %.0f; L·D/P alone %.0f", d, most, limit, simLimit*d.Seconds()/simPeriod.Seconds())
		if float64(most) > limit {
			t.Errorf("the fleet admitted %d in some %v, above the bound %.0f", most, d, limit)
		}
	}
}

// share is what Envoy i admitted in steps [from, to), and the fleet.
func (s *sim) share(i int, from, to time.Duration) (int64, int64) {
	var mine, all int64
	for k := int(from / s.step); k < int(to/s.step) && k < len(s.admitted); k++ {
		mine += s.admitted[k][i]
		for _, n := range s.admitted[k] {
			all += n
		}
	}
	return mine, all
}

func newRedisHome(t testing.TB, addr string) *grant.RedisHome {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	h, err := grant.OpenHome(ctx, "redis://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestFleetBoundAndFairness runs four simulated Envoys on two replicas
// sharing one real Redis as home, with demand twice the limit moving from
// 14/4/2/0 requests per second to 0/2/4/14, one Envoy's stream dropped at
// 30 s, Envoy 0's answers lost as its demand falls: the bound holds throughout, each Envoy's part of what the fleet
// admits follows its part of the demand once the shares settle, the fleet
// uses the limit, and the bucket of the Envoy whose demand stopped is
// abandoned.
func TestFleetBoundAndFairness(t *testing.T) {
	red := redistest.Standalone(t)
	clock := newClock()
	var reps []*replica
	for range 2 {
		reps = append(reps, startReplica(t, simYAML, simOptions(clock, newRedisHome(t, red.Addr))))
	}
	s := &sim{t: t, clock: clock, step: 100 * time.Millisecond}
	for i := range 4 {
		s.envoys = append(s.envoys, newEnvoy(t, clock, reps[i/2].addr, "edge", time.Second, time.Duration(i)*250*time.Millisecond))
	}
	phase1 := []float64{14, 4, 2, 0}
	phase2 := []float64{0, 2, 4, 14}
	s.run(60*time.Second, func(i int, _ time.Duration) float64 { return phase1[i] }, func(at time.Duration) {
		if at == 30*time.Second {
			s.envoys[1].dropStream()
		}
	})
	s.run(60*time.Second, func(i int, _ time.Duration) float64 { return phase2[i] }, func(at time.Duration) {
		// Envoy 0's answers are lost while its share falls: it keeps
		// enforcing its larger share until the assignment expires, and
		// the share stays held at home until then.
		if at >= 60*time.Second && at < 62*time.Second && (at%time.Second) == 0 {
			s.envoys[0].loseNext = true
		}
	})
	checkBound(t, s, 2*time.Second)

	for _, c := range []struct {
		from, to time.Duration
		demand   []float64
	}{{40 * time.Second, 60 * time.Second, phase1}, {100 * time.Second, 120 * time.Second, phase2}} {
		var sum float64
		for _, d := range c.demand {
			sum += d
		}
		for i, d := range c.demand {
			mine, all := s.share(i, c.from, c.to)
			got, want := float64(mine)/float64(all), d/sum
			t.Logf("%v-%v: Envoy %d admitted %d of %d (%.2f), its demand %.2f of the fleet's", c.from, c.to, i, mine, all, got, want)
			if math.Abs(got-want) > 0.08 {
				t.Errorf("%v-%v: Envoy %d admitted %.2f of the fleet's total, want %.2f ± 0.08 (its part of the demand)", c.from, c.to, i, got, want)
			}
			if i == 0 {
				if lim := (c.to - c.from).Seconds() * simLimit / simPeriod.Seconds(); float64(all) < 0.85*lim {
					t.Errorf("%v-%v: the fleet admitted %d, under 85%% of the %.0f the limit allows: shares idle", c.from, c.to, all, lim)
				}
			}
		}
	}
	if n := len(s.envoys[0].buckets); n != 0 {
		t.Errorf("Envoy 0 still has %d buckets after 60 s without a request; want its bucket abandoned", n)
	}
	if n := s.envoys[1].streams; n != 2 {
		t.Errorf("Envoy 1 opened %d streams, want 2 (its stream was dropped once)", n)
	}
}

// TestReplicaRestart: an Envoy's replica stops (its assignments expired
// by Drain) and a new replica starts on the same home; the Envoys
// reconnect to it as new holders. The old grants stay counted until they
// end, so the bound holds across the restart, and the new holders get the
// whole limit back once they have.
func TestReplicaRestart(t *testing.T) {
	red := redistest.Standalone(t)
	clock := newClock()
	a := startReplica(t, simYAML, simOptions(clock, newRedisHome(t, red.Addr)))
	s := &sim{t: t, clock: clock, step: 100 * time.Millisecond}
	for i := range 2 {
		s.envoys = append(s.envoys, newEnvoy(t, clock, a.addr, "edge", time.Second, time.Duration(i)*500*time.Millisecond))
	}
	demand := func(int, time.Duration) float64 { return 10 }
	s.run(30*time.Second, demand, nil)

	// Drain sends every bucket's assignment with TTL 0, and ends the
	// streams: the Envoys fall back at once.
	drained := make(chan error, 1)
	go func() { drained <- a.svc.Drain(t.Context()) }()
	for i, e := range s.envoys {
		if err := e.drainStream(); err != nil {
			t.Logf("Envoy %d's stream ended: %v", i, err)
		}
		for _, b := range e.buckets {
			if b.expires.After(clock.Now()) {
				t.Errorf("Envoy %d: after the drain its assignment expires at %v, after now %v; want TTL 0", i, b.expires, clock.Now())
			}
		}
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	a.stop()

	b := startReplica(t, simYAML, simOptions(clock, newRedisHome(t, red.Addr)))
	for _, e := range s.envoys {
		e.addr = b.addr
		e.conn.Close()
		e2 := newEnvoy(t, clock, b.addr, "edge", e.interval, 0)
		e.conn, e.next = e2.conn, clock.Now()
	}
	s.run(30*time.Second, demand, nil)
	checkBound(t, s, 2*time.Second)
	_, all := s.share(0, 50*time.Second, 60*time.Second)
	if lim := 10 * simLimit / simPeriod.Seconds(); float64(all) < 0.85*lim {
		t.Errorf("20-30 s after the restart the fleet admitted %d, under 85%% of the %.0f the limit allows", all, lim)
	}
}

// TestBlanketAnswers: a bucket with no rule is ALLOW_ALL; a rule no token
// bucket expresses (a sliding window, a calendar month) is answered by its
// failure mode (fail_closed: DENY_ALL); each renewed with the TTL.
func TestBlanketAnswers(t *testing.T) {
	clock := newClock()
	r := startReplica(t, simYAML, simOptions(clock, nil))
	e := newEnvoy(t, clock, r.addr, "edge", time.Second, 0)
	for _, c := range []struct {
		id   map[string]string
		want string
	}{
		{map[string]string{"tenant": "acme"}, "blanket_rule:ALLOW_ALL"},
		{map[string]string{"tenant": "free"}, "blanket_rule:DENY_ALL"},
		{map[string]string{"tenant": "monthly"}, "blanket_rule:DENY_ALL"},
		{map[string]string{"other": "x"}, "blanket_rule:ALLOW_ALL"},
	} {
		e.request(c.id)
		b := e.buckets[key(c.id)]
		if got := fmt.Sprint(b.action); got != c.want && got != "{"+c.want+"}" {
			t.Errorf("bucket %v: strategy %v, want %s", c.id, got, c.want)
		}
		if got, want := b.expires.Sub(clock.Now()), 4*time.Second; got != want {
			t.Errorf("bucket %v: TTL %v, want %v", c.id, got, want)
		}
	}
}

// flakyHome is a home that fails every call while down.
type flakyHome struct {
	grant.Home
	down atomic.Bool
}

func (h *flakyHome) Grant(ctx context.Context, r grant.Request) (grant.Grant, error) {
	if h.down.Load() {
		return grant.Grant{}, errors.New("home unreachable")
	}
	return h.Home.Grant(ctx, r)
}

// TestHomeDown: while home does not answer, the reports are answered with
// no action, so the Envoys' assignments are not renewed past their
// grants: they expire within TTL and the Envoys fall back (DENY_ALL
// here); the bound holds throughout, and the fleet uses the limit again
// once home answers.
func TestHomeDown(t *testing.T) {
	clock := newClock()
	home := &flakyHome{Home: &grant.MemHome{}}
	r := startReplica(t, simYAML, simOptions(clock, home))
	s := &sim{t: t, clock: clock, step: 100 * time.Millisecond}
	for i := range 2 {
		s.envoys = append(s.envoys, newEnvoy(t, clock, r.addr, "edge", time.Second, time.Duration(i)*500*time.Millisecond))
	}
	demand := func(int, time.Duration) float64 { return 10 }
	s.run(20*time.Second, demand, nil)
	home.down.Store(true)
	s.run(20*time.Second, demand, nil)
	home.down.Store(false)
	s.run(20*time.Second, demand, nil)
	checkBound(t, s, 2*time.Second)
	// The last assignment was sent at most a reporting interval before
	// home went down, and lives TTL (4 s) from then.
	if _, all := s.share(0, 25*time.Second, 40*time.Second); all != 0 {
		t.Errorf("from 5 s after home went down until it came back the fleet admitted %d; want 0 (assignments expired, DENY_ALL fallback)", all)
	}
	if _, all := s.share(0, 50*time.Second, 60*time.Second); float64(all) < 0.85*simLimit {
		t.Errorf("10-20 s after home came back the fleet admitted %d, under 85%% of the %d the limit allows", all, simLimit)
	}
}
