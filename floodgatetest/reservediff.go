package floodgatetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// reserve is the model's Reserve: algorithm.Reserve on the model's state.
func (m *model) reserve(now, units, ttl int64, release bool) (algorithm.Hold, algorithm.Decision) {
	var h algorithm.Hold
	var d algorithm.Decision
	m.st, h, d = algorithm.Reserve(m.st, m.p, now, units, ttl, release)
	return h, d
}

// settle is the model's Settle.
func (m *model) settle(h algorithm.Hold, now, actual int64, cancel bool) (algorithm.Hold, algorithm.Settlement, algorithm.SettleCode, algorithm.Decision) {
	var st algorithm.Settlement
	var code algorithm.SettleCode
	var d algorithm.Decision
	m.st, h, st, code, d = algorithm.Settle(m.st, h, m.p, now, actual, cancel)
	return h, st, code, d
}

// testReserveDifferential mixes random decisions, reserves, commits and
// cancels (of holds live, settled or expired) on one key, in the store and
// in the model built from the algorithm package's Reserve and Settle, and
// wants the same answers at every step: decisions, what each settle gave
// back, charged or left short, whether it was replayed, and the errors of
// conflicts and expiries. The seed is fixed, so a failure repeats. It
// moves time, so it does not run with ServerTime.
func (s *suite) testReserveDifferential(t *testing.T, rv floodgate.Reserver) {
	if s.opts.ServerTime {
		t.Skip("moves time")
	}
	t.Parallel()
	for i, alg := range reservable() {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(0x5e77e, uint64(i)))
			for seq := range rounds(30) {
				s.reserveDifferential(t, rv, rng, alg, seq)
			}
		})
	}
}

// modelHold is a reservation as the model and the test know it.
type modelHold struct {
	id string
	h  algorithm.Hold
}

func (s *suite) reserveDifferential(t *testing.T, rv floodgate.Reserver, rng *rand.Rand, alg floodgate.Algorithm, seq int) {
	t.Helper()
	l := randomLimit(rng, alg, false)
	l.CountRejected = false // a reservation's excess is decided like a request; keep the model's denials simple
	key := s.key(t, fmt.Sprint(seq))
	m := newModel(l)
	now := base.Add(time.Duration(rng.Int64N(int64(time.Hour/us))) * us)
	var holds []modelHold
	var history []string
	var resetAfter time.Duration
	fail := func(i int, format string, args ...any) {
		t.Helper()
		t.Fatalf("sequence %d, limit %s, step %d: %s\nhistory:\n%s", seq, l, i, fmt.Sprintf(format, args...), strings.Join(history, "\n"))
	}
	for i := range differentialSteps {
		if i > 0 {
			dt := randomStep(rng, l)
			if resetAfter > 0 && resetAfter <= differentialMargin && dt < resetAfter {
				dt = resetAfter + time.Duration(rng.Int64N(1000))*us
			}
			now = now.Add(dt)
		}
		nowUS := now.UnixMicro()
		switch x := rng.IntN(10); {
		case x < 3: // a plain request
			r := randomRequest(rng, key, l)
			r.Now = now
			got, err := s.tryApply(t.Context(), r)
			if err != nil {
				fail(i, "Apply(%s): %v", describe(r), err)
			}
			want := floodgate.FromAlgorithm(m.step(r, nowUS), nowUS)
			history = append(history, fmt.Sprintf("\t%2d: %s → %s", i, describe(r), formatDecision(got)))
			if msg := compareDecisions(got, want); msg != "" {
				fail(i, "Apply differs from the model:%s", msg)
			}
			resetAfter = want.ResetAfter
		case x < 6 || len(holds) == 0: // a reserve
			units := 1 + rng.Int64N(max(l.Capacity(), 1)+1)
			ttl := time.Duration(1+rng.Int64N(int64(2*l.Period/us))) * us
			release := rng.IntN(2) == 0
			id := fmt.Sprintf("h%d", len(holds))
			res, err := rv.Reserve(t.Context(), floodgate.HoldRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: units, Now: now}}, ID: id, TTL: ttl, Release: release})
			if err != nil {
				fail(i, "Reserve %d (%s, ttl %v): %v", units, id, ttl, err)
			}
			h, d := m.reserve(nowUS, units, int64(ttl/us), release)
			holds = append(holds, modelHold{id, h})
			want := floodgate.FromAlgorithm(d, nowUS)
			history = append(history, fmt.Sprintf("\t%2d: reserve %d as %s for %v (release %v) → %s", i, units, id, ttl, release, formatDecision(res.Decisions[0])))
			if msg := compareDecisions(res.Decisions[0], want); msg != "" {
				fail(i, "Reserve differs from the model:%s", msg)
			}
			resetAfter = want.ResetAfter
		default: // a settle of a hold, live or not
			k := rng.IntN(len(holds))
			mh := &holds[k]
			cancel := rng.IntN(4) == 0
			var actual int64
			if !cancel {
				actual = rng.Int64N(2*mh.h.Units + 2)
			}
			sts, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Now: now}}, ID: mh.id, Actual: actual, Cancel: cancel})
			h, st, code, d := m.settle(mh.h, nowUS, actual, cancel)
			mh.h = h
			verb := fmt.Sprintf("commit %d", actual)
			if cancel {
				verb = "cancel"
			}
			history = append(history, fmt.Sprintf("\t%2d: %s of %s → %+v %v", i, verb, mh.id, sts, err))
			after, known, msg := checkSettlement(sts, err, st, code, d, nowUS)
			if msg != "" {
				fail(i, "%s: %s", verb, msg)
			}
			if known {
				resetAfter = after.ResetAfter
			}
		}
	}
}

// checkSettlement compares the answer of a commit or cancel, sts and
// err, with the model's settle of it at nowUS: its settlement st, its
// code and the decision d of the key's state after. It returns what
// differs, "" when nothing does, and, when the settle changed the state
// (neither a conflict nor too late), that state as the store must
// answer it (known is then true), whose ResetAfter the next step of a
// differential test may wait out.
func checkSettlement(sts []floodgate.Settlement, err error, st algorithm.Settlement, code algorithm.SettleCode, d algorithm.Decision, nowUS int64) (after floodgate.Decision, known bool, msg string) {
	wantErr := map[algorithm.SettleCode]error{algorithm.Conflict: floodgate.ErrConflict, algorithm.TooLate: floodgate.ErrExpired}[code]
	switch {
	case wantErr != nil && !errors.Is(err, wantErr):
		return after, false, fmt.Sprintf("%v, model %v", err, wantErr)
	case wantErr == nil && err != nil:
		return after, false, fmt.Sprintf("%v, model settled it", err)
	case code == algorithm.Conflict:
		return after, false, ""
	case len(sts) != 1:
		return after, false, fmt.Sprintf("%d settlements", len(sts))
	}
	got := sts[0]
	if got.Refunded != st.Refunded || got.Charged != st.Charged || got.Short != st.Short || got.Replayed != (code == algorithm.Replayed) {
		return after, false, fmt.Sprintf("%+v, model %+v (code %d)", got, st, code)
	}
	if code == algorithm.TooLate {
		return after, false, ""
	}
	after = floodgate.FromAlgorithm(d, nowUS)
	if msg := compareDecisions(got.Decision, after); msg != "" {
		return after, true, "the state after differs from the model:" + msg
	}
	return after, true, ""
}
