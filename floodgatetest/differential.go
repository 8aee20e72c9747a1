package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// model is the sequential model of one key under one limit: the state of
// the algorithm package, stepped directly.
type model struct {
	p  algorithm.Params
	st algorithm.State
}

func newModel(l floodgate.Limit) *model {
	return &model{p: l.Params(), st: algorithm.State{Kind: l.Kind()}}
}

// step decides r at nowUS and keeps the new state.
func (m *model) step(r floodgate.Request, nowUS int64) algorithm.Decision {
	op := algorithm.LeaseAcquire
	if r.Release {
		op = algorithm.LeaseRelease
	}
	var d algorithm.Decision
	m.st, d = m.st.StepLease(m.p, nowUS, r.Cost, r.Lease, op)
	return d
}

// testDifferential applies random sequences of requests (random limits,
// costs from 0 to above the capacity, leases, time steps) to the store and
// to the model, and wants the same Decision at every step. The seed is
// fixed, so a failure repeats.
//
// With explicit times a store may drop a key once its ResetAfter has passed
// by the store's own clock (a Redis TTL), which fake time does not follow.
// So when a decision leaves the key at most margin from empty, the next
// request comes no earlier than the key is empty; then whether the store
// kept the expired state or not, the algorithm decides the same. Time
// never goes backwards here, for the same reason.
func (s *suite) testDifferential(t *testing.T) {
	t.Parallel()
	for i, alg := range floodgate.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(0xf100d6a7e, uint64(i)))
			for seq := range rounds(40) {
				s.differential(t, rng, alg, seq)
			}
		})
	}
}

const (
	differentialSteps  = 40
	differentialMargin = 5 * time.Second
)

func (s *suite) differential(t *testing.T, rng *rand.Rand, alg floodgate.Algorithm, seq int) {
	t.Helper()
	l := randomLimit(rng, alg, s.opts.ServerTime)
	key := s.key(t, fmt.Sprint(seq))
	m := newModel(l)
	now := base.Add(time.Duration(rng.Int64N(int64(time.Hour/us))) * us)
	var history []string
	var resetAfter time.Duration
	for i := range differentialSteps {
		if i > 0 {
			dt := randomStep(rng, l)
			if resetAfter > 0 && resetAfter <= differentialMargin && dt < resetAfter {
				dt = resetAfter + time.Duration(rng.Int64N(1000))*us
			}
			now = now.Add(dt)
		}
		r := randomRequest(rng, key, l)
		if !s.opts.ServerTime {
			r.Now = now
		}
		got, err := s.tryApply(t.Context(), r)
		if err != nil {
			t.Fatalf("sequence %d step %d: Apply(%s): %v", seq, i, describe(r), err)
		}
		nowUS := now.UnixMicro()
		if s.opts.ServerTime {
			// The model decides at the time the store says it used.
			nowUS = got.Now.UnixMicro()
		}
		want := floodgate.FromAlgorithm(m.step(r, nowUS), nowUS)
		history = append(history, fmt.Sprintf("\t%2d: %s → %s", i, describe(r), formatDecision(got)))
		if msg := compareDecisions(got, want); msg != "" {
			t.Fatalf("sequence %d, limit %s: step %d differs from the model:%s\nhistory (store's decisions):\n%s",
				seq, l, i, msg, strings.Join(history, "\n"))
		}
		resetAfter = want.ResetAfter
	}
}

func compareDecisions(got, want floodgate.Decision) string {
	var msg string
	field := func(name string, got, want any) {
		msg += fmt.Sprintf("\n\t%s = %v, model %v", name, got, want)
	}
	if got.Allowed != want.Allowed {
		field("Allowed", got.Allowed, want.Allowed)
	}
	if got.Limit != want.Limit {
		field("Limit", got.Limit, want.Limit)
	}
	if got.Remaining != want.Remaining {
		field("Remaining", got.Remaining, want.Remaining)
	}
	if got.ResetAfter != want.ResetAfter {
		field("ResetAfter", got.ResetAfter, want.ResetAfter)
	}
	if got.RetryAfter != want.RetryAfter {
		field("RetryAfter", got.RetryAfter, want.RetryAfter)
	}
	if !got.Now.Equal(want.Now) {
		field("Now", got.Now, want.Now)
	}
	return msg
}

func formatDecision(d floodgate.Decision) string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	return fmt.Sprintf("%s remaining=%d/%d reset=%v retry=%v", verdict, d.Remaining, d.Limit, d.ResetAfter, d.RetryAfter)
}

// randomLimit is a valid random limit of alg. With serverTime its period
// is short (100µs to 20ms), so that the store's own clock moves through
// windows and refills while a sequence runs; otherwise it is 10s to 5min,
// long against differentialMargin.
func randomLimit(rng *rand.Rand, alg floodgate.Algorithm, serverTime bool) floodgate.Limit {
	for {
		l := floodgate.Limit{Algorithm: alg}
		switch x := rng.IntN(20); {
		case x == 0:
			l.Limit = 0
		case x < 4 && alg != floodgate.SlidingWindowLog && alg != floodgate.Concurrency:
			l.Limit = 13 + rng.Int64N(5000)
		default:
			l.Limit = 1 + rng.Int64N(12)
		}
		periodUS := 10_000_000 + rng.Int64N(290_000_000)
		if serverTime {
			periodUS = 100 + rng.Int64N(20_000)
		}
		l.Period = time.Duration(periodUS) * us
		k := l.Kind()
		if k.Burst() && rng.IntN(3) > 0 {
			l.Burst = 1 + rng.Int64N(3*max(l.Limit, 1))
		}
		if k.FirstHit() && rng.IntN(2) == 0 {
			l.Window = floodgate.FirstHit
		}
		if k.CountRejected() && rng.IntN(3) == 0 {
			l.CountRejected = true
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// randomStep is a random time step: often none, sometimes a microsecond or
// a few, often up to one emission interval, up to a period or up to three.
func randomStep(rng *rand.Rand, l floodgate.Limit) time.Duration {
	period := int64(l.Period / us)
	interval := period / max(l.Limit, 1)
	var d int64
	switch x := rng.IntN(20); {
	case x < 5:
		d = 0
	case x < 7:
		d = 1 + rng.Int64N(10)
	case x < 13:
		d = rng.Int64N(interval + 1)
	case x < 17:
		d = rng.Int64N(period + 1)
	default:
		d = rng.Int64N(3*period + 1)
	}
	return time.Duration(d) * us
}

// randomRequest is a random request on key: a cost of 0, 1, up to the
// capacity or above it; for Concurrency, one of five leases acquired or
// released, or a peek without a lease.
func randomRequest(rng *rand.Rand, key string, l floodgate.Limit) floodgate.Request {
	c := l.Capacity()
	r := floodgate.Request{Key: key, Limit: l}
	switch x := rng.IntN(20); {
	case x < 3:
		r.Cost = 0
	case x < 10:
		r.Cost = 1
	case x < 18:
		r.Cost = 1 + rng.Int64N(max(c, 1))
	default:
		r.Cost = c + 1 + rng.Int64N(2)
	}
	if l.Algorithm == floodgate.Concurrency {
		switch x := rng.IntN(20); {
		case x < 2:
			r.Cost = 0 // a peek
		case x < 5:
			r.Lease, r.Release = string(rune('a'+rng.IntN(5))), true
		default:
			r.Lease = string(rune('a' + rng.IntN(5)))
		}
	}
	return r
}
