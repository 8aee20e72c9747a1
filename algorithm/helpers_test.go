package algorithm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Times in the step tables are offsets from t0, a whole hour since the
// epoch (2023-11-14T22:00:00Z), so aligned windows of a second, a minute or
// an hour all start at t0.
const (
	t0  int64 = 1_699_999_200_000_000
	ms  int64 = 1_000
	sec int64 = 1_000_000
)

// machine puts the state of one algorithm behind a common face, so that one
// run helper, one invariant checker and one brute-force RetryAfter search
// drive all six.
type machine interface {
	// step applies one request; id and op matter to Concurrency only.
	step(p Params, now, cost int64, id string, op LeaseOp) Decision
	// expires is the state's Expires.
	expires(p Params) int64
	// clone is an independent copy (Step may reuse a slice's array).
	clone() machine
	// zero reports whether the state is the zero state.
	zero() bool
}

type fixedM struct{ s FixedWindow }

func (m *fixedM) step(p Params, now, cost int64, _ string, _ LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost)
	return d
}
func (m *fixedM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *fixedM) clone() machine         { c := *m; return &c }
func (m *fixedM) zero() bool             { return m.s == FixedWindow{} }

type logM struct{ s SlidingWindowLog }

func (m *logM) step(p Params, now, cost int64, _ string, _ LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost)
	return d
}
func (m *logM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *logM) clone() machine         { return &logM{SlidingWindowLog{Log: slices.Clone(m.s.Log)}} }
func (m *logM) zero() bool             { return len(m.s.Log) == 0 }

type slidingM struct{ s SlidingWindow }

func (m *slidingM) step(p Params, now, cost int64, _ string, _ LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost)
	return d
}
func (m *slidingM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *slidingM) clone() machine         { c := *m; return &c }
func (m *slidingM) zero() bool             { return m.s == SlidingWindow{} }

type bucketM struct{ s TokenBucket }

func (m *bucketM) step(p Params, now, cost int64, _ string, _ LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost)
	return d
}
func (m *bucketM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *bucketM) clone() machine         { c := *m; return &c }
func (m *bucketM) zero() bool             { return m.s == TokenBucket{} }

type gcraM struct{ s GCRA }

func (m *gcraM) step(p Params, now, cost int64, _ string, _ LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost)
	return d
}
func (m *gcraM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *gcraM) clone() machine         { c := *m; return &c }
func (m *gcraM) zero() bool             { return m.s == GCRA{} }

type concM struct{ s Concurrency }

func (m *concM) step(p Params, now, cost int64, id string, op LeaseOp) (d Decision) {
	m.s, d = m.s.Step(p, now, cost, id, op)
	return d
}
func (m *concM) expires(p Params) int64 { return m.s.Expires(p) }
func (m *concM) clone() machine         { return &concM{Concurrency{Units: slices.Clone(m.s.Units)}} }
func (m *concM) zero() bool             { return len(m.s.Units) == 0 }

// step is one line of a step table: a request at now = at with its cost
// (and, for Concurrency, its lease and op) and the exact Decision the spec
// in doc.go gives for it.
type step struct {
	at   int64
	cost int64
	id   string
	op   LeaseOp
	want Decision
}

// allow is the Decision of an admitted request.
func allow(limit, remaining, resetAfter int64) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: resetAfter}
}

// deny is the Decision of a denied request.
func deny(limit, remaining, resetAfter, retryAfter int64) Decision {
	return Decision{Limit: limit, Remaining: remaining, ResetAfter: resetAfter, RetryAfter: retryAfter}
}

// run applies steps to m in order and checks each Decision, and that
// ResetAfter is Expires - now (stores use ResetAfter as the key's TTL).
func run(t *testing.T, p Params, m machine, steps []step) {
	t.Helper()
	for i, st := range steps {
		got := m.step(p, st.at, st.cost, st.id, st.op)
		if got != st.want {
			t.Errorf("step %d (now t0%+d, cost %d %s): got %+v, want %+v", i, st.at-t0, st.cost, st.id, got, st.want)
		}
		if exp := m.expires(p); exp == 0 {
			if got.ResetAfter != 0 {
				t.Errorf("step %d: zero Expires but ResetAfter %d", i, got.ResetAfter)
			}
		} else if got, want := got.ResetAfter, exp-st.at; got != want {
			t.Errorf("step %d: ResetAfter %d, want Expires - now = %d", i, got, want)
		}
	}
}

// capacity is the Limit every Decision of p reports: Burst for the buckets
// (0 when their Limit is 0, which denies everything), Limit elsewhere.
func capacity(p Params, m machine) int64 {
	switch m.(type) {
	case *bucketM, *gcraM:
		if p.Limit <= 0 {
			return 0
		}
		return p.Burst
	}
	return p.Limit
}

// checkStep checks what every Decision promises, for the step of cost (id,
// op) at now that took before (a clone of the state, kept) to after (m, the
// state now) and answered d:
//
//   - Limit is the capacity; 0 <= Remaining <= Limit;
//   - RetryAfter is 0 exactly when allowed, Never exactly when the cost is
//     above the capacity, and otherwise at most ResetAfter;
//   - ResetAfter is Expires - now, Expires is after now unless the state is
//     the zero state, and at now+ResetAfter the key is back to the zero
//     state (not one microsecond earlier);
//   - Remaining is the largest cost admitted right after the step;
//   - the same request is denied at now+RetryAfter-1 and admitted at
//     now+RetryAfter if nothing else happens;
//   - a denied request leaves the state as it was, unless CountRejected.
//
// Every probe steps a clone, so m is left as it is.
func checkStep(t *testing.T, p Params, before, m machine, now, cost int64, id string, op LeaseOp, d Decision) {
	t.Helper()
	at := func() string {
		return fmt.Sprintf("params %+v, now %d, cost %d %q op %d: %+v", p, now, cost, id, op, d)
	}
	c := capacity(p, m)
	if d.Limit != c {
		t.Fatalf("%s: Limit %d, want capacity %d", at(), d.Limit, c)
	}
	if d.Remaining < 0 || d.Remaining > d.Limit {
		t.Fatalf("%s: Remaining outside [0, Limit]", at())
	}
	release := op == LeaseRelease
	switch {
	case d.Allowed && d.RetryAfter != 0:
		t.Fatalf("%s: allowed with a RetryAfter", at())
	case d.Allowed:
	case release:
		t.Fatalf("%s: a release was denied", at())
	case (cost > c) != (d.RetryAfter == Never):
		t.Fatalf("%s: RetryAfter Never must mean cost above the capacity %d", at(), c)
	case d.RetryAfter != Never && (d.RetryAfter <= 0 || d.RetryAfter > d.ResetAfter):
		t.Fatalf("%s: RetryAfter outside (0, ResetAfter]", at())
	}
	exp := m.expires(p)
	switch {
	case m.zero() != (exp == 0):
		t.Fatalf("%s: zero state %v but Expires %d", at(), m.zero(), exp)
	case exp != 0 && exp <= now:
		t.Fatalf("%s: Expires %d is not after now", at(), exp)
	case exp == 0 && d.ResetAfter != 0, exp != 0 && d.ResetAfter != exp-now:
		t.Fatalf("%s: ResetAfter is not Expires %d - now", at(), exp)
	}
	if exp > MaxExact {
		t.Fatalf("%s: Expires %d above MaxExact", at(), exp)
	}
	// peek steps a clone of m at now+dt with cost (a fresh lease for
	// Concurrency, so that the units of id count as held).
	probe := func(from machine, dt, cost int64, id string) (machine, Decision) {
		x := from.clone()
		return x, x.step(p, now+dt, cost, id, LeaseAcquire)
	}
	if d.ResetAfter > 0 {
		if x, _ := probe(m, d.ResetAfter, 0, "probe"); !x.zero() {
			t.Fatalf("%s: not back to the zero state at now+ResetAfter", at())
		}
		if x, _ := probe(m, d.ResetAfter-1, 0, "probe"); x.zero() {
			t.Fatalf("%s: back to the zero state before now+ResetAfter", at())
		}
	}
	if _, e := probe(m, 0, d.Remaining+1, "probe"); e.Allowed {
		t.Fatalf("%s: a cost of Remaining+1 is admitted right after: %+v", at(), e)
	}
	if d.Remaining > 0 {
		if _, e := probe(m, 0, d.Remaining, "probe"); !e.Allowed {
			t.Fatalf("%s: a cost of Remaining is denied right after: %+v", at(), e)
		}
	}
	if !d.Allowed && d.RetryAfter > 0 {
		if _, e := probe(m, d.RetryAfter-1, cost, id); e.Allowed {
			t.Fatalf("%s: admitted one microsecond before RetryAfter: %+v", at(), e)
		}
		if _, e := probe(m, d.RetryAfter, cost, id); !e.Allowed {
			t.Fatalf("%s: still denied at RetryAfter: %+v", at(), e)
		}
	}
	if !d.Allowed && !p.CountRejected {
		if diff := sameState(p, before, m, now, id); diff != "" {
			t.Fatalf("%s: a denial changed the state: %s", at(), diff)
		}
	}
}

// sameState reports how a and b differ as states, by the decisions they
// give from now on: each probe steps clones of both at a few instants with
// a few costs, for lease id and for another lease. "" means no difference.
func sameState(p Params, a, b machine, now int64, id string) string {
	c := capacity(p, a)
	period := p.Period
	for _, dt := range []int64{0, 1, period / 3, period - 1, period, period + period/2, 2*period - 1, 2 * period} {
		for _, cost := range []int64{0, 1, c / 2, c, c + 1} {
			for _, lease := range []string{id, "other"} {
				da := a.clone().step(p, now+dt, cost, lease, LeaseAcquire)
				db := b.clone().step(p, now+dt, cost, lease, LeaseAcquire)
				if da != db {
					return fmt.Sprintf("at now%+d cost %d lease %q: %+v before, %+v after", dt, cost, lease, da, db)
				}
			}
		}
	}
	return ""
}

// firstTrue is the least t in [lo, hi] with f(t), for f false then true
// (monotone); hi+1 if there is none.
func firstTrue(lo, hi int64, f func(int64) bool) int64 {
	for lo <= hi {
		mid := lo + (hi-lo)/2
		if f(mid) {
			hi = mid - 1
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// model is an independent reference implementation of one algorithm,
// written from the package doc for clarity rather than speed.
type model interface {
	step(now, cost int64, id string, op LeaseOp) Decision
}

// event is one step of a random sequence and what the algorithm answered.
type event struct {
	now, cost int64
	id        string
	op        LeaseOp
	d         Decision
}

// sequence makes a random sequence of n requests for p starting near t0:
// time mostly moves forward by up to two periods, lands now and then on a
// window boundary or one microsecond before it, and goes backwards (by up
// to a period) when back is set; costs are mostly small, sometimes the
// capacity or above it.
func sequence(rng *rand.Rand, p Params, capacity int64, n int, back, leases bool) []event {
	now := t0 + rng.Int64N(3*p.Period)
	evs := make([]event, n)
	ids := []string{"a", "b", "c"}
	for i := range evs {
		switch r := rng.IntN(20); {
		case r == 0:
			now += p.Period - now%p.Period
		case r == 1:
			now += p.Period - now%p.Period - 1
		case r == 2 && back:
			now = max(0, now-rng.Int64N(p.Period+1))
		case r < 6:
		default:
			now += rng.Int64N(2*p.Period/max(1, capacity) + 2)
		}
		var cost int64
		switch r := rng.IntN(12); {
		case r == 0:
			cost = capacity + 1 + rng.Int64N(3)
		case r == 1:
			cost = capacity
		case r == 2:
			cost = 0
		default:
			cost = rng.Int64N(min(capacity, 4) + 1)
		}
		ev := event{now: now, cost: cost}
		if leases {
			ev.id = ids[rng.IntN(len(ids))]
			if rng.IntN(5) == 0 {
				ev.op = LeaseRelease
			}
		}
		evs[i] = ev
	}
	return evs
}

// differential runs random sequences through the algorithm and its model
// and wants the same Decision at every step, and every step to pass
// checkStep.
func differential(t *testing.T, seed uint64, rounds, steps int, params func(*rand.Rand) Params, newMachine func() machine, newModel func(Params) model, back bool) {
	t.Helper()
	simulate(t, seed, rounds, steps, params, newMachine, newModel, back)
}

// traces runs random sequences through the algorithm alone and returns
// them with their decisions, for the admission bounds each algorithm
// checks.
func traces(t *testing.T, seed uint64, rounds, steps int, params func(*rand.Rand) Params, newMachine func() machine, back bool) []trace {
	t.Helper()
	return simulate(t, seed, rounds, steps, params, newMachine, nil, back)
}

// simulate runs the random sequences; with a model it compares and checks
// every step.
func simulate(t *testing.T, seed uint64, rounds, steps int, params func(*rand.Rand) Params, newMachine func() machine, newModel func(Params) model, back bool) []trace {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var all []trace
	for range rounds {
		p := params(rng)
		m := newMachine()
		_, leases := m.(*concM)
		evs := sequence(rng, p, capacity(p, m), steps, back, leases)
		var ref model
		if newModel != nil {
			ref = newModel(p)
		}
		for i, ev := range evs {
			if ref == nil {
				evs[i].d = m.step(p, ev.now, ev.cost, ev.id, ev.op)
				continue
			}
			before := m.clone()
			d := m.step(p, ev.now, ev.cost, ev.id, ev.op)
			if want := ref.step(ev.now, ev.cost, ev.id, ev.op); d != want {
				for _, e := range evs[max(0, i-8):i] {
					t.Logf("  now %d cost %d %q op %d: %+v", e.now, e.cost, e.id, e.op, e.d)
				}
				t.Fatalf("params %+v step %d now %d cost %d %q op %d: got %+v, model %+v", p, i, ev.now, ev.cost, ev.id, ev.op, d, want)
			}
			checkStep(t, p, before, m, ev.now, ev.cost, ev.id, ev.op, d)
			evs[i].d = d
		}
		all = append(all, trace{p, evs})
	}
	return all
}

// trace is a random sequence of requests under p and their decisions.
type trace struct {
	p   Params
	evs []event
}

// admitted sums the costs admitted at instants in [from, to).
func (tr trace) admitted(from, to int64) int64 {
	var n int64
	for _, ev := range tr.evs {
		if ev.d.Allowed && ev.op == LeaseAcquire && from <= ev.now && ev.now < to {
			n += ev.cost
		}
	}
	return n
}

// periods are the periods of the random sequences: tiny ones cross many
// window boundaries in a few steps; 333333 µs and 1 s give the buckets
// intervals with a fraction of a microsecond.
var periods = []int64{1, 2, 3, 5, 7, 10, 64, 1000, 333_333, sec}

func randomPeriod(rng *rand.Rand) int64 { return periods[rng.IntN(len(periods))] }
