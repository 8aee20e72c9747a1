package redisstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// refundHarness is a script of the refund functions of refund.lua (and
// everything they use, as the scripts include them) with a main part that
// runs one refund: ARGV alg, limit, period, burst, first_hit (0/1), now,
// at, units, then the state's fields; the reply is the units given back,
// then the state's fields after. The sliding log's state is the sorted
// set KEYS[1].
var refundHarness = func() string {
	src := scripts.refund.src
	return src[:strings.LastIndex(src, mainMarker)] + mainMarker + `
local name = ARGV[1]
local p = {limit = ARGV[2] + 0, period = ARGV[3] + 0, burst = ARGV[4] + 0, first_hit = ARGV[5] == '1', count_rejected = false}
local now, at, units = ARGV[6] + 0, ARGV[7] + 0, ARGV[8] + 0
if name == 'sliding_window_log' then
  return {sliding_window_log_refund(KEYS[1], p, now, at, units)}
end
local fields = ({fixed_window = FIXED_WINDOW_FIELDS, sliding_window = SLIDING_WINDOW_FIELDS, token_bucket = TOKEN_BUCKET_FIELDS, gcra = GCRA_FIELDS})[name]
local s = {}
for i, f in ipairs(fields) do
  s[f] = ARGV[8 + i] + 0
end
local out, back = RESERVERS[name].refund(p, s, now, at, units)
local r = {back}
for _, f in ipairs(fields) do
  r[#r + 1] = out[f]
end
return r
`
}()

// TestRefundDifferential runs random histories of steps and refunds of
// every algorithm with reservations through the algorithm package, and
// at every refund runs refund.lua's function on the same state, params,
// time and units: each must give back as many units and leave the same
// state, as the scripts mirror algorithm/refund.go line for line. The
// histories move time forward by up to a third of a period, sometimes
// back, and refund units admitted at earlier steps (of this window, the
// last, or long gone), or at times nothing was admitted. Half the token
// bucket's steps wait (Params.Wait), so its refunds meet buckets in debt.
func TestRefundDifferential(t *testing.T) {
	c := newRueidis(t, standaloneAddr(t))
	logKey := testPrefix(t) + ":log"
	checkTTLsAtEnd(t, c, "")
	histories, steps := 30, 120
	if testing.Short() {
		histories = 6
	}
	for _, alg := range []string{"fixed_window", "sliding_window", "sliding_window_log", "token_bucket", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(alg))))
			refunds, back, debts := 0, int64(0), 0
			for h := range histories {
				p := algorithm.Params{Limit: 1 + rng.Int64N(12), Period: []int64{1_000_000, 7_000_000, 60_000_000}[rng.IntN(3)]}
				switch alg {
				case "token_bucket", "gcra":
					p.Burst = 1 + rng.Int64N(2*p.Limit)
				case "fixed_window":
					p.FirstHit = rng.IntN(2) == 0
				}
				r := &refunder{t: t, alg: alg, p: p, now: 1_700_000_000_000_000 + rng.Int64N(1<<30), eval: func(keys, args []string) []int64 {
					vals, err := c.Do(t.Context(), c.B().Eval().Script(refundHarness).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsIntSlice()
					if err != nil {
						t.Fatalf("history %d: %v", h, err)
					}
					return vals
				}, logKey: logKey, c: c}
				for range steps {
					switch r.now += rng.Int64N(p.Period/3 + 1); {
					case rng.IntN(10) == 0:
						r.now -= rng.Int64N(p.Period/5 + 1)
					}
					if rng.IntN(5) < 3 {
						r.wait = 0
						if alg == "token_bucket" && rng.IntN(2) == 0 {
							// A step that waits, leaving the bucket in
							// debt for the refunds to give back.
							r.wait = 1 + rng.Int64N(3*p.Limit)
						}
						r.step(rng.Int64N(p.Limit + 1))
						continue
					}
					at := r.now - rng.Int64N(2*p.Period)
					if len(r.admitted) > 0 && rng.IntN(4) > 0 {
						at = r.admitted[rng.IntN(len(r.admitted))]
					}
					back += r.refund(at, rng.Int64N(p.Limit+3))
					refunds++
				}
				debts += r.debts
			}
			if alg == "token_bucket" && debts < histories*steps/20 {
				t.Errorf("only %d steps left the bucket in debt: the refunds of a debt are barely tested", debts)
			}
			if back == 0 {
				t.Errorf("%d refunds gave nothing back: the histories test nothing", refunds)
			}
			t.Logf("%d refunds, %d units given back (%d steps in debt)", refunds, back, debts)
		})
	}
	c.Do(t.Context(), c.B().Del().Key(logKey).Build())
}

// refunder runs one history of an algorithm in Go, comparing each refund
// with Lua's.
type refunder struct {
	t        *testing.T
	alg      string
	p        algorithm.Params
	now      int64
	admitted []int64 // the times of admitted steps
	fw       algorithm.FixedWindow
	sw       algorithm.SlidingWindow
	log      algorithm.SlidingWindowLog
	tb       algorithm.TokenBucket
	wait     int64 // the next token bucket step's Params.Wait
	debts    int   // token bucket steps that left the bucket in debt
	g        algorithm.GCRA
	eval     func(keys, args []string) []int64
	logKey   string
	c        rueidis.Client // for the sliding log's sorted set
	history  []string
}

func (r *refunder) step(cost int64) {
	var d algorithm.Decision
	switch r.alg {
	case "fixed_window":
		r.fw, d = r.fw.Step(r.p, r.now, cost)
	case "sliding_window":
		r.sw, d = r.sw.Step(r.p, r.now, cost)
	case "sliding_window_log":
		r.log, d = r.log.Step(r.p, r.now, cost)
	case "token_bucket":
		p := r.p
		p.Wait = r.wait
		r.tb, d = r.tb.Step(p, r.now, cost)
		if r.tb.Last > r.now {
			r.debts++
		}
	case "gcra":
		r.g, d = r.g.Step(r.p, r.now, cost)
	}
	if d.Allowed && cost > 0 {
		r.admitted = append(r.admitted, r.now)
	}
	r.history = append(r.history, fmt.Sprintf("step now=%d cost=%d wait=%d allowed=%v", r.now, cost, r.wait, d.Allowed))
}

// refund refunds units admitted at at in Go and in Lua, compares, and
// returns the units given back.
func (r *refunder) refund(at, units int64) int64 {
	t := r.t
	t.Helper()
	flag := "0"
	if r.p.FirstHit {
		flag = "1"
	}
	args := []string{r.alg, itoa(r.p.Limit), itoa(r.p.Period), itoa(r.p.Burst), flag, itoa(r.now), itoa(at), itoa(units)}
	keys := []string{r.logKey}
	var want []int64
	switch r.alg {
	case "fixed_window":
		args = append(args, itoa(r.fw.Start), itoa(r.fw.Count), itoa(r.fw.Next))
		var back int64
		r.fw, back = r.fw.Refund(r.p, r.now, at, units)
		want = []int64{back, r.fw.Start, r.fw.Count, r.fw.Next}
	case "sliding_window":
		args = append(args, itoa(r.sw.Start), itoa(r.sw.Prev), itoa(r.sw.Curr))
		var back int64
		r.sw, back = r.sw.Refund(r.p, r.now, at, units)
		want = []int64{back, r.sw.Start, r.sw.Prev, r.sw.Curr}
	case "token_bucket":
		args = append(args, itoa(r.tb.Taken), itoa(r.tb.Last), itoa(r.tb.LastFrac))
		var back int64
		r.tb, back = r.tb.Refund(r.p, r.now, at, units)
		want = []int64{back, r.tb.Taken, r.tb.Last, r.tb.LastFrac}
	case "gcra":
		args = append(args, itoa(r.g.TAT), itoa(r.g.TATFrac))
		var back int64
		r.g, back = r.g.Refund(r.p, r.now, at, units)
		want = []int64{back, r.g.TAT, r.g.TATFrac}
	case "sliding_window_log":
		r.writeLog()
		var back int64
		r.log, back = r.log.Refund(r.p, r.now, at, units)
		want = append([]int64{back}, r.log.Log...)
	}
	got := r.eval(keys, args)
	if r.alg == "sliding_window_log" {
		got = append(got, r.readLog()...)
	}
	r.history = append(r.history, fmt.Sprintf("refund now=%d at=%d units=%d: %v", r.now, at, units, want))
	if !slices.Equal(got, want) {
		t.Fatalf("%s %+v: Lua %v, Go %v (given back, then the state); history:\n%s", r.alg, r.p, got, want, strings.Join(r.history, "\n"))
	}
	return want[0]
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// writeLog writes the Go sliding log to its sorted set, with a TTL.
func (r *refunder) writeLog() {
	ctx := r.t.Context()
	cmds := rueidis.Commands{r.c.B().Del().Key(r.logKey).Build()}
	if len(r.log.Log) > 0 {
		z := r.c.B().Zadd().Key(r.logKey).ScoreMember()
		for i, at := range r.log.Log {
			z = z.ScoreMember(float64(at), "m"+strconv.Itoa(i))
		}
		cmds = append(cmds, z.Build(), r.c.B().Pexpire().Key(r.logKey).Milliseconds(60_000).Build())
	}
	for _, res := range r.c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// readLog reads the scores of the sliding log's sorted set, in order.
func (r *refunder) readLog() []int64 {
	zs, err := r.c.Do(r.t.Context(), r.c.B().Zrange().Key(r.logKey).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		r.t.Fatal(err)
	}
	out := make([]int64, len(zs))
	for i, z := range zs {
		out[i] = int64(z.Score)
	}
	return out
}
