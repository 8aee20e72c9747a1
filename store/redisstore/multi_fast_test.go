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

// TestFastMultiDifferential checks fixed_window_multi.lua against the
// single-request scripts: random coalesced runs of aligned fixed-window
// requests go out through the runner's multi (which sends such a run to
// fixed_window_multi.lua) on the keys of one store, and the same requests,
// one by one in the order that script decides them (its keys grouped by
// parameter set), through the single path (fixed_window_fast.lua, then
// fixed_window.lua) on another store's keys; the requests the run declined
// then go alone on both. Every decision, and after every run every counter
// hash, must be the same on both. The runs mix limits of one period (one
// counter, different limits), costs of 0 and above the limit,
// count_rejected, times of the same run in two windows, clocks that go
// back (a later window's counter), layout-1 states of the window (seeded)
// and of another, and foreign values at a layout-1 key; the test requires
// that the script declined requests of both kinds it leaves to the single
// path, and decided most. It runs by EVALSHA and, with Options.Functions,
// by FCALL of the library's functions of the same scripts (multi.lua,
// which the library ran such runs through before, declines none of the
// layout-1 states, so the test fails on it).
func TestFastMultiDifferential(t *testing.T) {
	t.Run("call=evalsha", func(t *testing.T) { testFastMultiDifferential(t, nil) })
	t.Run("call=fcall", func(t *testing.T) {
		_, c := testFastMultiDifferential(t, &Options{Functions: true})
		checkFunctionsOnly(t, c)
	})
}

// testFastMultiDifferential is TestFastMultiDifferential on stores of opts,
// which it returns with their client.
func testFastMultiDifferential(t *testing.T, opts *Options) (*Store, rueidis.Client) {
	addr := standaloneAddr(t)
	sa, ca := testStore(t, addr, opts)
	sb, cb := testStore(t, addr, opts)
	rng := rand.New(rand.NewPCG(7, 31))
	periods := []time.Duration{10 * time.Second, 10*time.Second + 333*time.Microsecond, time.Minute, time.Hour, 24 * time.Hour}
	var decided, declined, seeded, later, foreign int
	sequences := 30
	if testing.Short() {
		sequences = 8
	}
	for seq := range sequences {
		var limits []floodgate.Limit
		for range 1 + rng.IntN(3) {
			l := floodgate.Limit{Algorithm: floodgate.FixedWindow, Period: periods[rng.IntN(len(periods))], CountRejected: rng.IntN(3) == 0}
			if len(limits) > 0 && rng.IntN(2) == 0 {
				l.Period = limits[0].Period // the same counter under another limit
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
		subjects := []string{fmt.Sprint("s", seq, "a"), fmt.Sprint("s", seq, "b"), fmt.Sprint("s", seq, "c")}
		now := t0.UnixMicro() + rng.Int64N(1<<36)
		// Layout-1 states, the same at both stores' keys: of the window
		// of now (seeded into a new counter), of the window before (not
		// counted), or a foreign value.
		for _, subj := range subjects {
			l := limits[rng.IntN(len(limits))]
			p := int64(l.Period / time.Microsecond)
			start := now - now%p
			var state string
			switch rng.IntN(8) {
			case 0:
				state = strconv.FormatInt(start, 10) + ":" + strconv.Itoa(1+rng.IntN(5))
			case 1:
				state = strconv.FormatInt(start-p, 10) + ":3"
			case 2:
				state = "foreign"
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
			switch r := rng.IntN(10); {
			case r == 0:
				now -= 1 + rng.Int64N(int64(limits[0].Period/time.Microsecond)) // back, maybe a window
			case r <= 3:
				now += rng.Int64N(2 * int64(limits[0].Period/time.Microsecond))
			default:
				now += rng.Int64N(int64(limits[0].Period/time.Microsecond)/8 + 1)
			}
			n := 2 + rng.IntN(11)
			csA, csB := make([]*call, n), make([]*call, n)
			for i := range n {
				l := limits[rng.IntN(len(limits))]
				r := floodgate.Request{Key: subjects[rng.IntN(len(subjects))], Limit: l, Cost: 1}
				switch x := rng.IntN(10); {
				case x < 2:
					r.Cost = 0
				case x < 3:
					r.Cost = rng.Int64N(l.Limit + 3)
				}
				at := now
				if rng.IntN(8) == 0 {
					at -= rng.Int64N(int64(l.Period / time.Microsecond)) // another set, maybe another window
				}
				r.Now = time.UnixMicro(at)
				csA[i] = &call{r: r, alg: floodgate.FixedWindow, key: sa.Key(r.Key, l), now: at}
				csB[i] = &call{r: r, alg: floodgate.FixedWindow, key: sb.Key(r.Key, l), now: at}
			}
			_, _, order, _, ok := fastMultiArgs(csA)
			if !ok {
				t.Fatal("fastMultiArgs did not take a run of aligned fixed-window requests")
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
				want, err := sb.runner.one(t.Context(), c)
				if err != nil || res[i].err != nil || res[i].d != want {
					t.Fatalf("seq %d: decisions differ at the last request: run %+v, %v; alone %+v, %v\n  %s",
						seq, res[i].d, res[i].err, want, err, strings.Join(history, "\n  "))
				}
			}
			for _, i := range alone {
				declined++
				// Why it was declined, for the test's coverage: a layout-1
				// key or a later window's counter.
				v, _ := ca.Do(t.Context(), ca.B().Get().Key(csA[i].key).Build()).ToString()
				switch {
				case v == "foreign":
					foreign++
				case v != "":
					seeded++
				default:
					later++
				}
				got, errA := sa.runner.one(t.Context(), csA[i])
				want, errB := sb.runner.one(t.Context(), csB[i])
				if (errA != nil) != (errB != nil) || got != want || (errA != nil && !errors.Is(errA, floodgate.ErrUnexpectedReply)) {
					t.Fatalf("seq %d: a declined request differs alone: %+v, %v; want %+v, %v\n  %s", seq, got, errA, want, errB, strings.Join(history, "\n  "))
				}
			}
			for _, subj := range subjects {
				for _, l := range limits {
					a, errA := ca.Do(t.Context(), ca.B().Hgetall().Key(sa.Key(subj, l)+":w").Build()).AsStrMap()
					b, errB := cb.Do(t.Context(), cb.B().Hgetall().Key(sb.Key(subj, l)+":w").Build()).AsStrMap()
					if errA != nil || errB != nil || !maps.Equal(a, b) {
						t.Fatalf("seq %d run %d: %s's counters %v, %v; want %v, %v\n  %s", seq, run, subj, a, errA, b, errB, strings.Join(history, "\n  "))
					}
				}
			}
		}
	}
	t.Logf("%d requests decided in runs, %d declined (%d layout-1 states, %d foreign, %d later windows)", decided, declined, seeded, foreign, later)
	if seeded == 0 || foreign == 0 || later == 0 || declined > decided/2 {
		t.Errorf("%d decided and %d declined (%d layout-1, %d foreign, %d later windows): want some declined of each kind, most decided", decided, declined, seeded, foreign, later)
	}
	return sa, ca
}
