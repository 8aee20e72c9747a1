package redisstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// TestGCRAMultiDifferential checks gcra_multi.lua (and the store's
// decisions from its reply, decodeGCRA) against gcra.lua: random coalesced
// runs of GCRA requests go out through the runner's multi (which sends
// such a run to gcra_multi.lua) on the keys of one store, and the same
// requests, one by one in the order that script decides them (its keys
// grouped by parameter set), to gcra.lua on another store's keys; the
// requests the run declined then go to gcra.lua alone on both. Every
// decision, and after every run every state, must be the same on both.
// The runs mix limits of one period (one state, different rates and
// bursts: a fraction kept under a larger limit), costs of 0 and above the
// burst, several requests of one key, times of the same run in two sets,
// clocks that go back, and foreign values, which the script declines. It
// runs by EVALSHA and by FCALL (Options.Functions); a single request goes
// to gcra_multi.lua as a run of one, checked by TestDifferential.
func TestGCRAMultiDifferential(t *testing.T) {
	t.Run("call=evalsha", func(t *testing.T) { testGCRAMultiDifferential(t, nil) })
	t.Run("call=fcall", func(t *testing.T) {
		c := testGCRAMultiDifferential(t, &Options{Functions: true})
		checkFunctionsOnly(t, c)
	})
}

// gcraAlone decides c by gcra.lua, as the runner did before gcra_multi.lua.
func gcraAlone(t *testing.T, s *Store, c *call) (floodgate.Decision, error) {
	t.Helper()
	args := appendRequest(nil, &c.r, c.alg, c.now)
	vals, err := s.runner.run(t.Context(), scripts.single[floodgate.GCRA], []string{c.key}, args)
	if err != nil {
		return floodgate.Decision{}, err
	}
	if len(vals) != replyLen {
		t.Fatalf("gcra.lua replied %v", vals)
	}
	return decode(vals, c.now)
}

func testGCRAMultiDifferential(t *testing.T, opts *Options) rueidis.Client {
	addr := standaloneAddr(t)
	sa, ca := testStore(t, addr, opts)
	sb, cb := testStore(t, addr, opts)
	rng := rand.New(rand.NewPCG(11, 47))
	periods := []time.Duration{time.Second, 10*time.Second + 333*time.Microsecond, time.Minute, 7 * time.Hour}
	var decided, declined, allowed, denied, fractions, repeated int
	sequences := 30
	if testing.Short() {
		sequences = 8
	}
	for seq := range sequences {
		var limits []floodgate.Limit
		for range 1 + rng.IntN(3) {
			l := floodgate.Limit{Algorithm: floodgate.GCRA, Period: periods[rng.IntN(len(periods))]}
			if len(limits) > 0 && rng.IntN(2) == 0 {
				l.Period = limits[0].Period // the same state under another rate
			}
			switch rng.IntN(6) {
			case 0:
				l.Limit = 1 + rng.Int64N(1000)
			default:
				l.Limit = 1 + rng.Int64N(9)
			}
			if rng.IntN(2) == 0 {
				l.Burst = 1 + rng.Int64N(2*l.Limit)
			}
			limits = append(limits, l)
		}
		subjects := []string{fmt.Sprint("g", seq, "a"), fmt.Sprint("g", seq, "b"), fmt.Sprint("g", seq, "c")}
		// Foreign values, the same at both stores' keys.
		for _, subj := range subjects {
			if rng.IntN(6) != 0 {
				continue
			}
			l := limits[rng.IntN(len(limits))]
			v := []string{"foreign", "1:2:3", "12"}[rng.IntN(3)]
			for _, s := range []struct {
				st *Store
				c  rueidis.Client
			}{{sa, ca}, {sb, cb}} {
				if err := s.c.Do(t.Context(), s.c.B().Set().Key(s.st.Key(subj, l)).Value(v).Px(2*time.Minute).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
		}
		now := t0.UnixMicro() + rng.Int64N(1<<36)
		var history []string
		for run := range 12 {
			p := int64(limits[0].Period / time.Microsecond)
			step := p / limits[0].Limit // about one emission interval
			switch r := rng.IntN(10); {
			case r == 0:
				now -= 1 + rng.Int64N(4*step+1) // back
			case r == 1:
				now += rng.Int64N(2 * p)
			default:
				now += rng.Int64N(step + 1)
			}
			n := 2 + rng.IntN(11)
			csA, csB := make([]*call, n), make([]*call, n)
			seen := map[string]bool{}
			for i := range n {
				l := limits[rng.IntN(len(limits))]
				r := floodgate.Request{Key: subjects[rng.IntN(len(subjects))], Limit: l, Cost: 1}
				burst := l.Params().Burst
				switch x := rng.IntN(10); {
				case x < 2:
					r.Cost = 0
				case x < 4:
					r.Cost = rng.Int64N(burst + 3)
				}
				at := now
				if rng.IntN(8) == 0 {
					at -= rng.Int64N(step + 1) // another set
				}
				r.Now = time.UnixMicro(at)
				csA[i] = &call{r: r, alg: floodgate.GCRA, key: sa.Key(r.Key, l), now: at}
				csB[i] = &call{r: r, alg: floodgate.GCRA, key: sb.Key(r.Key, l), now: at}
				if seen[csA[i].key] {
					repeated++
				}
				seen[csA[i].key] = true
			}
			_, _, order, _, ok := gcraMultiArgs(csA)
			if !ok {
				t.Fatal("gcraMultiArgs did not take a run of GCRA requests")
			}
			res, err := sa.runner.multi(t.Context(), csA)
			if err != nil {
				t.Fatalf("seq %d run %d: %v", seq, run, err)
			}
			var alone []int
			for _, i := range order {
				c := csB[i]
				history = append(history, fmt.Sprintf("run %d: %s cost %d at %d (%s)", run, c.r.Limit, c.r.Cost, c.now, c.r.Key))
				if errors.Is(res[i].err, errAlone) {
					alone = append(alone, i)
					history[len(history)-1] += ": declined"
					continue
				}
				decided++
				want, err := gcraAlone(t, sb, c)
				if err != nil || res[i].err != nil || res[i].d != want {
					t.Fatalf("seq %d: decisions differ at the last request: run %+v, %v; alone %+v, %v\n  %s",
						seq, res[i].d, res[i].err, want, err, strings.Join(history, "\n  "))
				}
				if want.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			for _, i := range alone {
				declined++
				_, errA := gcraAlone(t, sa, csA[i])
				_, errB := gcraAlone(t, sb, csB[i])
				if errA == nil || errB == nil || !errors.Is(errA, floodgate.ErrUnexpectedReply) {
					t.Fatalf("seq %d: a declined request alone: %v, %v; want both to fail on the foreign value\n  %s", seq, errA, errB, strings.Join(history, "\n  "))
				}
			}
			for _, subj := range subjects {
				for _, l := range limits {
					a, errA := ca.Do(t.Context(), ca.B().Get().Key(sa.Key(subj, l)).Build()).ToString()
					b, errB := cb.Do(t.Context(), cb.B().Get().Key(sb.Key(subj, l)).Build()).ToString()
					if a != b || (errA == nil) != (errB == nil) {
						t.Fatalf("seq %d run %d: %s's state %q, %v; want %q, %v\n  %s", seq, run, subj, a, errA, b, errB, strings.Join(history, "\n  "))
					}
					if _, frac, ok := strings.Cut(a, ":"); ok && frac != "0" && !strings.Contains(frac, ":") {
						fractions++
					}
				}
			}
		}
	}
	t.Logf("%d requests decided in runs (%d allowed, %d denied), %d declined; %d repeated keys, %d states with a fraction", decided, allowed, denied, declined, repeated, fractions)
	if allowed == 0 || denied < decided/20 || declined == 0 || declined > decided/4 || repeated == 0 || fractions == 0 {
		t.Errorf("want some of each: allowed, denied, declined (a few), repeated keys, fractions")
	}
	return ca
}
