package redisstore

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
)

// TestSlidingMultiDifferential checks sliding_window_multi.lua against the
// single-request scripts, as TestFastMultiDifferential does
// fixed_window_multi.lua: random coalesced runs of sliding-window requests
// go out through the runner's multi (which sends such a run to
// sliding_window_multi.lua) on the keys of one store, and the same
// requests, one by one in the order that script decides them, through the
// single path (sliding_window_fast.lua, then sliding_window.lua) on another
// store's keys; the requests the run declined then go alone on both. Every
// decision, and after every run every counter hash and whether it has a
// TTL, must be the same on both. The runs mix limits of one period (the
// same counters, different limits), costs of 0 and above the limit,
// count_rejected, times of the same run in two windows, clocks that go back
// (a later window's counter), times that skip windows (a hash of older
// windows only), layout-1 states of the window, of the one before and of an
// older one (seeded by sliding_window.lua), foreign values at a layout-1
// key, and zero states in the counters; the test requires that the script declined requests of the kinds it
// leaves to the single path, and decided most. It runs by EVALSHA and, with
// Options.Functions, by FCALL of the library's functions.
func TestSlidingMultiDifferential(t *testing.T) {
	t.Run("call=evalsha", func(t *testing.T) { testSlidingMultiDifferential(t, nil) })
	t.Run("call=fcall", func(t *testing.T) {
		_, c := testSlidingMultiDifferential(t, &Options{Functions: true})
		checkFunctionsOnly(t, c)
	})
}

func testSlidingMultiDifferential(t *testing.T, opts *Options) (*Store, rueidis.Client) {
	addr := standaloneAddr(t)
	sa, ca := testStore(t, addr, opts)
	sb, cb := testStore(t, addr, opts)
	rng := rand.New(rand.NewPCG(11, 43))
	periods := []time.Duration{10 * time.Second, 10*time.Second + 333*time.Microsecond, time.Minute, time.Hour}
	var decided, denied, declined, seeded, foreign, other int
	sequences := 30
	if testing.Short() {
		sequences = 8
	}
	for seq := range sequences {
		var limits []floodgate.Limit
		for range 1 + rng.IntN(3) {
			l := floodgate.Limit{Algorithm: floodgate.SlidingWindow, Period: periods[rng.IntN(len(periods))], CountRejected: rng.IntN(3) == 0}
			if len(limits) > 0 && rng.IntN(2) == 0 {
				l.Period = limits[0].Period // the same counters under another limit
			}
			switch rng.IntN(8) {
			case 0:
				l.Limit = 0
			case 1:
				l.Limit = 1 + rng.Int64N(1000)
			default:
				l.Limit = 1 + rng.Int64N(8)
			}
			limits = append(limits, l)
		}
		subjects := []string{fmt.Sprint("s", seq, "a"), fmt.Sprint("s", seq, "b"), fmt.Sprint("s", seq, "c"), fmt.Sprint("s", seq, "d")}
		now := t0.UnixMicro() + rng.Int64N(1<<36)
		// Layout-1 states, the same at both stores' keys: of the window
		// of now, of the one before, of an older one, or a foreign value.
		for _, subj := range subjects {
			l := limits[rng.IntN(len(limits))]
			p := int64(l.Period / time.Microsecond)
			start := now - now%p
			var state string
			switch rng.IntN(12) {
			case 0:
				state = fmt.Sprintf("%d:%d:%d", start, rng.IntN(4), 1+rng.IntN(4))
			case 1:
				state = fmt.Sprintf("%d:%d:%d", start-p, rng.IntN(4), 1+rng.IntN(4))
			case 2:
				state = fmt.Sprintf("%d:2:3", start-3*p)
			case 3:
				state = "foreign"
			case 4:
				// Not layout 1: a zero state in the counters, which no
				// save leaves but sliding_window.lua takes.
				for _, s := range []struct {
					st *Store
					c  rueidis.Client
				}{{sa, ca}, {sb, cb}} {
					k := s.st.Key(subj, l) + ":w"
					if err := s.c.Do(t.Context(), s.c.B().Hset().Key(k).FieldValue().FieldValue(strconv.FormatInt(start, 10), "0").Build()).Error(); err != nil {
						t.Fatal(err)
					}
					if err := s.c.Do(t.Context(), s.c.B().Pexpire().Key(k).Milliseconds(int64(2*time.Minute/time.Millisecond)).Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				continue
			default:
				continue
			}
			for _, s := range []struct {
				st *Store
				c  rueidis.Client
			}{{sa, ca}, {sb, cb}} {
				if err := s.c.Do(t.Context(), s.c.B().Set().Key(s.st.Key(subj, l)).Value(state).Px(2*time.Minute).Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
		}
		var history []string
		for run := range 12 {
			p0 := int64(limits[0].Period / time.Microsecond)
			switch r := rng.IntN(16); {
			case r == 0:
				now -= 1 + rng.Int64N(2*p0) // back, maybe a window or two
			case r == 1:
				now += 2*p0 + rng.Int64N(p0/4) // two windows on: a hash of older windows
			case r <= 5:
				now += rng.Int64N(2 * p0)
			default:
				now += rng.Int64N(p0/8 + 1)
			}
			n := 2 + rng.IntN(11)
			csA, csB := make([]*call, n), make([]*call, n)
			for i := range n {
				l := limits[rng.IntN(len(limits))]
				r := floodgate.Request{Key: subjects[rng.IntN(len(subjects))], Limit: l, Cost: 1}
				switch x := rng.IntN(10); {
				case x < 2:
					r.Cost = 0
				case x < 4:
					r.Cost = rng.Int64N(l.Limit + 3)
				}
				at := now
				if rng.IntN(16) == 0 {
					at -= rng.Int64N(int64(l.Period / time.Microsecond)) // another set, maybe another window
				}
				r.Now = time.UnixMicro(at)
				csA[i] = &call{r: r, alg: floodgate.SlidingWindow, key: sa.Key(r.Key, l), now: at}
				csB[i] = &call{r: r, alg: floodgate.SlidingWindow, key: sb.Key(r.Key, l), now: at}
			}
			_, _, order, _, ok := slidingMultiArgs(csA)
			if !ok {
				t.Fatal("slidingMultiArgs did not take a run of sliding-window requests")
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
				if !res[i].d.Allowed {
					denied++
				}
				want, err := sb.runner.one(t.Context(), c)
				if err != nil || res[i].err != nil || res[i].d != want {
					t.Fatalf("seq %d: decisions differ at the last request: run %+v, %v; alone %+v, %v\n  %s",
						seq, res[i].d, res[i].err, want, err, strings.Join(history, "\n  "))
				}
			}
			for _, i := range alone {
				declined++
				// Why it was declined, for the test's coverage.
				v, _ := ca.Do(t.Context(), ca.B().Get().Key(csA[i].key).Build()).ToString()
				switch {
				case v == "foreign":
					foreign++
				case v != "":
					seeded++
				default:
					other++ // a later window's counter, a hash of older ones, a zero state
				}
				got, errA := sa.runner.one(t.Context(), csA[i])
				want, errB := sb.runner.one(t.Context(), csB[i])
				if (errA != nil) != (errB != nil) || got != want || (errA != nil && !errors.Is(errA, floodgate.ErrUnexpectedReply)) {
					t.Fatalf("seq %d: a declined request differs alone: %+v, %v; want %+v, %v\n  %s", seq, got, errA, want, errB, strings.Join(history, "\n  "))
				}
			}
			for _, subj := range subjects {
				for _, l := range limits {
					ka, kb := sa.Key(subj, l)+":w", sb.Key(subj, l)+":w"
					a, errA := ca.Do(t.Context(), ca.B().Hgetall().Key(ka).Build()).AsStrMap()
					b, errB := cb.Do(t.Context(), cb.B().Hgetall().Key(kb).Build()).AsStrMap()
					if errA != nil || errB != nil || !maps.Equal(a, b) {
						t.Fatalf("seq %d run %d: %s's counters %v, %v; want %v, %v\n  %s", seq, run, subj, a, errA, b, errB, strings.Join(history, "\n  "))
					}
					ta, errA := ca.Do(t.Context(), ca.B().Pttl().Key(ka).Build()).AsInt64()
					tb, errB := cb.Do(t.Context(), cb.B().Pttl().Key(kb).Build()).AsInt64()
					// The same TTL, set at the same request time, read a
					// moment apart: a TTL not set again is a period off.
					if errA != nil || errB != nil || (ta < 0) != (tb < 0) || ta == -1 || tb == -1 || ta-tb > 3000 || tb-ta > 3000 {
						t.Fatalf("seq %d run %d: %s's counters' TTL %d ms, %v; want %d ms, %v\n  %s", seq, run, subj, ta, errA, tb, errB, strings.Join(history, "\n  "))
					}
				}
			}
		}
	}
	t.Logf("%d requests decided in runs (%d denied), %d declined (%d layout-1 states, %d foreign, %d other)", decided, denied, declined, seeded, foreign, other)
	if seeded == 0 || foreign == 0 || other == 0 || denied == 0 || declined > decided {
		t.Errorf("%d decided (%d denied) and %d declined (%d layout-1, %d foreign, %d other): want some declined of each kind, more decided", decided, denied, declined, seeded, foreign, other)
	}
	return sa, ca
}

// TestUnpackSliding checks the unpacking of sliding_window_multi.lua's
// packed decisions, and that a value the script never sends decodes to an
// error.
func TestUnpackSliding(t *testing.T) {
	const limit, period, now, left = 10, 1000, 5000, 300
	for _, c := range []struct {
		x, retry int64
		want     [replyLen]int64
	}{
		{3*8 + 2*2 + 1, 0, [replyLen]int64{1, limit, 3, left + period, 0, now}},
		{0*8 + 1*2 + 0, 77, [replyLen]int64{0, limit, 0, left, 77, now}},
		{5*8 + 0*2 + 0, -1, [replyLen]int64{0, limit, 5, 0, -1, now}},
	} {
		if got := unpackSliding(c.x, limit, period, now, left, c.retry); got != c.want {
			t.Errorf("unpackSliding(%d) = %v, want %v", c.x, got, c.want)
		}
	}
	for _, x := range []int64{-2, 3 * 2, 11*8 + 1} {
		v := unpackSliding(x, limit, period, now, left, 0)
		if _, err := decode(v[:], now); !errors.Is(err, floodgate.ErrUnexpectedReply) {
			t.Errorf("unpackSliding(%d) decodes with error %v, want ErrUnexpectedReply", x, err)
		}
	}
}
