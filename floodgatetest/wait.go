package floodgatetest

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// testWaitDifferential mixes random waits (Limiter.Schedule, with maxWait
// up to three periods), plain requests, cancels and commits of the slots
// on one key of a GCRA or token bucket limit, through a Limiter over the
// store on a fake clock, and wants at every step the answers of the
// model: algorithm.Reserve and Settle under the params a wait reserves
// with (GCRA: the burst raised by W = floor(maxWait/T); token bucket:
// Params.Wait = W, a bucket that may go into debt by W units), and for
// each slot the delay Schedule derives from its decision. So a token
// bucket's debt, the requests queued behind it and the refunds that give
// it back are checked in every store the suite runs on. The seed is
// fixed, so a failure repeats. It moves time, so it does not run with
// ServerTime.
func (s *suite) testWaitDifferential(t *testing.T, _ floodgate.Reserver) {
	if s.opts.ServerTime {
		t.Skip("moves time")
	}
	t.Parallel()
	for i, alg := range []floodgate.Algorithm{floodgate.GCRA, floodgate.TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(0x29, uint64(i)))
			waited := 0
			for seq := range rounds(30) {
				waited += s.waitDifferential(t, rng, alg, seq)
			}
			if waited < rounds(30)*differentialSteps/20 {
				t.Errorf("only %d slots in the future: the sequences test little", waited)
			}
			t.Logf("%d slots in the future", waited)
		})
	}
}

// waitHold is a slot as the test and the model know it.
type waitHold struct {
	s *floodgate.Slot
	h algorithm.Hold
	p algorithm.Params // the params its hold keeps
}

// waitParams is the params a wait of maxWait reserves l under (see
// Limiter.Schedule), W, and the params its hold keeps for a settle.
func waitParams(l floodgate.Limit, maxWait time.Duration) (reserve algorithm.Params, w int64, hold algorithm.Params) {
	p := l.Params()
	x := new(big.Int).Mul(big.NewInt(maxWait.Microseconds()), big.NewInt(p.Limit))
	w = x.Div(x, big.NewInt(p.Period)).Int64()
	reserve, hold = p, p
	if l.Algorithm == floodgate.GCRA {
		reserve.Burst += w
		hold.Burst += w
	} else {
		reserve.Wait = w
	}
	return reserve, w, hold
}

// slotDelayOf is the delay Schedule gives a slot of decision d: its
// ResetAfter less Burst*T rounded down, between 0 and maxWait.
func slotDelayOf(d algorithm.Decision, p algorithm.Params, maxWait time.Duration) time.Duration {
	x := new(big.Int).Mul(big.NewInt(p.Burst), big.NewInt(p.Period))
	burstT := x.Div(x, big.NewInt(p.Limit)).Int64()
	return min(max(0, time.Duration(d.ResetAfter-burstT)*us), maxWait)
}

func (s *suite) waitDifferential(t *testing.T, rng *rand.Rand, alg floodgate.Algorithm, seq int) (waited int) {
	t.Helper()
	l := floodgate.Limit{Algorithm: alg, Limit: 1 + rng.Int64N(12), Period: time.Duration(1+rng.Int64N(60)) * time.Second}
	l.Burst = 1 + rng.Int64N(2*l.Limit)
	key := s.key(t, fmt.Sprint(seq))
	now := base.Add(time.Duration(rng.Int64N(int64(time.Hour/us))) * us)
	clock := NewFakeClock(now)
	lim, err := floodgate.New(s.store, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	plain := l.Params()
	st := algorithm.State{Kind: l.Kind()}
	var holds []waitHold
	var history []string
	var resetAfter time.Duration
	fail := func(i int, format string, args ...any) {
		t.Helper()
		t.Fatalf("sequence %d, limit %s, step %d: %s\nhistory:\n%s", seq, l, i, fmt.Sprintf(format, args...), strings.Join(history, "\n"))
	}
	ctx := t.Context()
	for i := range differentialSteps {
		if i > 0 {
			dt := randomStep(rng, l)
			if rng.IntN(2) == 0 {
				dt = time.Duration(rng.Int64N(int64(l.Period/us)/l.Limit+1)) * us
			}
			if resetAfter > 0 && resetAfter <= differentialMargin && dt < resetAfter {
				dt = resetAfter + time.Duration(rng.Int64N(1000))*us
			}
			now = now.Add(dt)
			clock.Set(now)
		}
		nowUS := now.UnixMicro()
		switch x := rng.IntN(10); {
		case x < 2: // a plain request
			cost := rng.Int64N(l.Burst + 1)
			got, err := lim.AllowN(ctx, key, l, cost)
			if err != nil {
				fail(i, "AllowN(%d): %v", cost, err)
			}
			var d algorithm.Decision
			st, d = st.Step(plain, nowUS, cost)
			want := floodgate.FromAlgorithm(d, nowUS)
			history = append(history, fmt.Sprintf("\t%2d: at %v allow %d → %s", i, now.Sub(base), cost, formatDecision(got)))
			if msg := compareDecisions(got, want); msg != "" {
				fail(i, "AllowN differs from the model:%s", msg)
			}
			resetAfter = want.ResetAfter
		case x < 7 || len(holds) == 0: // a wait
			n := 1 + rng.Int64N(l.Burst)
			maxWait := time.Duration(rng.Int64N(int64(3*l.Period/us))) * us
			slot, got, err := lim.Schedule(ctx, key, l, n, maxWait, nil)
			if err != nil {
				fail(i, "Schedule(%d, %v): %v", n, maxWait, err)
			}
			rp, w, hp := waitParams(l, maxWait)
			var h algorithm.Hold
			var d algorithm.Decision
			ttl := min(maxWait+time.Second, floodgate.MaxHoldTTL)
			st, h, d = algorithm.Reserve(st, rp, nowUS, n, int64(ttl/us), false)
			want := floodgate.FromAlgorithm(d, nowUS)
			want.Limit = l.Capacity()
			if alg == floodgate.GCRA {
				want.Remaining = max(0, want.Remaining-w)
			}
			history = append(history, fmt.Sprintf("\t%2d: at %v wait %d up to %v (W %d) → %s", i, now.Sub(base), n, maxWait, w, formatDecision(got)))
			if msg := compareDecisions(got, want); msg != "" {
				fail(i, "Schedule differs from the model:%s", msg)
			}
			if got.Allowed {
				wantDelay := slotDelayOf(d, plain, maxWait)
				history[len(history)-1] += fmt.Sprintf(" slot in %v", slot.Delay)
				if slot.Delay != wantDelay || !slot.At.Equal(now.Add(wantDelay)) {
					fail(i, "slot in %v at %v, model %v", slot.Delay, slot.At.Sub(base), wantDelay)
				}
				if wantDelay > 0 {
					waited++
				}
				holds = append(holds, waitHold{s: slot, h: h, p: hp})
			}
			resetAfter = want.ResetAfter
		default: // a cancel or a commit of a slot
			k := rng.IntN(len(holds))
			wh := &holds[k]
			cancel := rng.IntN(3) > 0
			var actual int64
			var sts []floodgate.Settlement
			var err error
			if cancel {
				sts, err = wh.s.Cancel(ctx)
			} else {
				actual = rng.Int64N(wh.h.Units + 1)
				sts, err = wh.s.Commit(ctx, actual)
			}
			var code algorithm.SettleCode
			var stl algorithm.Settlement
			var d algorithm.Decision
			st, wh.h, stl, code, d = algorithm.Settle(st, wh.h, wh.p, nowUS, actual, cancel)
			verb := fmt.Sprintf("commit %d", actual)
			if cancel {
				verb = "cancel"
			}
			history = append(history, fmt.Sprintf("\t%2d: at %v %s of slot %d → %+v %v", i, now.Sub(base), verb, k, sts, err))
			after, known, msg := checkSettlement(sts, err, stl, code, d, nowUS)
			if msg != "" {
				fail(i, "%s: %s", verb, msg)
			}
			if known {
				resetAfter = after.ResetAfter
			}
		}
	}
	return waited
}
