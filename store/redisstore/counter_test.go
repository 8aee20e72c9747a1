package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestUpgradeSeedsCounter checks the rolling upgrade of fixed_window.lua:
// the state a version before the window counters left in a key (layout 1)
// is counted by the first request of the same window, on each path that
// makes a counter (a single request by EVALSHA and by FCALL, a first-hit
// window), and only read; a state of another window is not counted.
func TestUpgradeSeedsCounter(t *testing.T) {
	addr := standaloneAddr(t)
	const minute = int64(time.Minute / time.Microsecond)
	now := t0.Add(17 * time.Second).UnixMicro()
	start := now - now%minute
	for _, o := range []Options{{}, {Functions: true}} {
		s, c := testStore(t, addr, &o)
		for _, tc := range []struct {
			name, state string
			l           floodgate.Limit
			remaining   int64
		}{
			{"same window", strconv.FormatInt(start, 10) + ":4", limitOf(floodgate.FixedWindow, 10, time.Minute), 5},
			{"window before", strconv.FormatInt(start-minute, 10) + ":4", limitOf(floodgate.FixedWindow, 10, time.Minute), 9},
			{"first hit", strconv.FormatInt(now-1000, 10) + ":4", floodgate.Limit{Limit: 10, Period: time.Minute, Window: floodgate.FirstHit}, 5},
		} {
			subject := tc.name + strconv.FormatBool(o.Functions)
			k := s.Key(subject, tc.l)
			if err := c.Do(t.Context(), c.B().Set().Key(k).Value(tc.state).Px(time.Minute).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			d, err := s.Apply(t.Context(), request(subject, tc.l, time.UnixMicro(now)))
			if err != nil || !d.Allowed || d.Remaining != tc.remaining {
				t.Errorf("%s (functions %v): %+v, %v; want allowed with %d remaining", tc.name, o.Functions, d, err, tc.remaining)
			}
			if v, err := c.Do(t.Context(), c.B().Get().Key(k).Build()).ToString(); err != nil || v != tc.state {
				t.Errorf("%s: the layout-1 key holds %q, %v; want %q as it was", tc.name, v, err, tc.state)
			}
			// The next request counts on the counter alone.
			if d, err := s.Apply(t.Context(), request(subject, tc.l, time.UnixMicro(now))); err != nil || d.Remaining != tc.remaining-1 {
				t.Errorf("%s: second request %+v, %v; want %d remaining", tc.name, d, err, tc.remaining-1)
			}
		}
	}
}

// TestUpgradeSeedsSlidingWindow checks the rolling upgrade of
// sliding_window.lua: the string state "<start>:<prev>:<curr>" a version
// before the window counters left in a key (layout 1) is the state the
// first request decides on, on the single script, the library (FCALL), a
// coalesced run and a batch, and it is only read: the next request counts
// on the counters alone, and a key with no layout-1 state gets none, so a
// version before the counters, which reads only that key, never misreads
// them.
func TestUpgradeSeedsSlidingWindow(t *testing.T) {
	addr := standaloneAddr(t)
	const minute = int64(time.Minute / time.Microsecond)
	now := t0.Add(17 * time.Second).UnixMicro()
	start := now - now%minute
	l := limitOf(floodgate.SlidingWindow, 10, time.Minute)
	state := func(start, prev, curr int64) string {
		return strconv.FormatInt(start, 10) + ":" + strconv.FormatInt(prev, 10) + ":" + strconv.FormatInt(curr, 10)
	}
	for _, o := range []Options{{}, {Functions: true}} {
		s, c := testStore(t, addr, &o)
		for _, tc := range []struct {
			name, state string
			remaining   int64
		}{
			// 17 s into the window, the window before weighs 43/60 of its
			// count, rounded up.
			{"same window", state(start, 6, 2), 10 - 5 - 3},
			{"window before", state(start-minute, 3, 4), 10 - 3 - 1},
			{"two windows before", state(start-2*minute, 3, 4), 10 - 1},
			// The clock went backwards: the state stays in its window.
			{"later window", state(start+minute, 2, 3), 10 - 2 - 4},
			{"moved without counting", state(start, 6, 0), 10 - 5 - 1},
			{"none", "", 10 - 1},
		} {
			for _, path := range []string{"single", "batch", "multi"} {
				subject := tc.name + strconv.FormatBool(o.Functions) + path
				k := s.Key(subject, l)
				if tc.state != "" {
					if err := c.Do(t.Context(), c.B().Set().Key(k).Value(tc.state).Px(time.Minute).Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				apply := func() (floodgate.Decision, error) {
					r := request(subject, l, time.UnixMicro(now))
					switch path {
					case "batch":
						ds, err := s.ApplyBatch(t.Context(), []floodgate.Request{r, request(subject+"/other", l, time.UnixMicro(now))})
						if err != nil {
							return floodgate.Decision{}, err
						}
						return ds[0], nil
					case "multi":
						// multi.lua, as a coalesced run sends it: one set,
						// this request, and one of another key.
						n, lim, per := strconv.FormatInt(now, 10), "10", strconv.FormatInt(minute, 10)
						vals, err := c.Do(t.Context(), c.B().Eval().Script(scripts.multiOf[floodgate.SlidingWindow].src).Numkeys(2).
							Key(k, s.Key(subject+"/other", l)).Arg("1", string(floodgate.SlidingWindow), n, lim, per, "0", "0", "1", "1", "", "1", "1", "").Build()).AsIntSlice()
						if err != nil {
							return floodgate.Decision{}, err
						}
						return decode(vals[:replyLen], now)
					}
					return s.Apply(t.Context(), r)
				}
				d, err := apply()
				if err != nil || !d.Allowed || d.Remaining != tc.remaining {
					t.Errorf("%s: %+v, %v; want allowed with %d remaining", subject, d, err, tc.remaining)
				}
				v, err := c.Do(t.Context(), c.B().Get().Key(k).Build()).ToString()
				if tc.state == "" && !rueidis.IsRedisNil(err) {
					t.Errorf("%s: the layout-1 key holds %q, %v; want none", subject, v, err)
				} else if tc.state != "" && (err != nil || v != tc.state) {
					t.Errorf("%s: the layout-1 key holds %q, %v; want %q as it was", subject, v, err, tc.state)
				}
				// The next request counts on the counters alone.
				if d, err := apply(); err != nil || d.Remaining != tc.remaining-1 {
					t.Errorf("%s: second request %+v, %v; want %d remaining", subject, d, err, tc.remaining-1)
				}
			}
		}
	}
}

// TestSlidingWindowCounters runs sequences that reach the corners of a
// sliding window's counters (sliding_window.lua) against memstore and
// requires the same decisions: a state that moved to a window without
// counting in it (a peek, a denial) and a clock that goes back into the
// window before it, which Step decides in the later window (the counter of
// 0 that marks it); a clock gone back two windows; windows skipped; a lower
// limit of the same period reading counts above it (the clamps). After
// each step the hash holds at most the counters of the state's two
// windows.
func TestSlidingWindowCounters(t *testing.T) {
	addr := standaloneAddr(t)
	const minute = int64(time.Minute / time.Microsecond)
	base := t0.UnixMicro() - t0.UnixMicro()%minute
	type step struct {
		at, cost, limit int64 // at: µs after base
		countRejected   bool
	}
	sequences := map[string][]step{
		"peek then back":   {{10e6, 4, 10, false}, {61e6, 0, 10, false}, {30e6, 1, 10, false}, {30e6, 6, 10, false}, {62e6, 1, 10, false}},
		"denial then back": {{10e6, 9, 10, false}, {61e6, 5, 10, false}, {59e6, 1, 10, false}, {59e6, 1, 10, false}, {130e6, 1, 10, false}},
		"back two windows": {{10e6, 3, 10, false}, {70e6, 2, 10, false}, {130e6, 1, 10, false}, {15e6, 1, 10, false}, {140e6, 9, 10, true}},
		"skips":            {{10e6, 3, 10, false}, {200e6, 2, 10, false}, {260e6, 0, 10, false}, {400e6, 1, 10, false}},
		"clamp prev":       {{10e6, 9, 10, false}, {70e6, 1, 10, false}, {75e6, 0, 4, false}, {80e6, 1, 10, false}},
		"clamps":           {{10e6, 9, 10, false}, {20e6, 1, 4, true}, {70e6, 0, 4, false}, {75e6, 3, 10, false}, {80e6, 2, 4, true}, {85e6, 5, 10, false}},
	}
	for _, o := range []Options{{}, {Functions: true}} {
		s, c := testStore(t, addr, &o)
		for name, seq := range sequences {
			mem := memstore.New(&memstore.Options{SweepInterval: -1})
			subject := name + strconv.FormatBool(o.Functions)
			for i, st := range seq {
				l := limitOf(floodgate.SlidingWindow, st.limit, time.Minute)
				l.CountRejected = st.countRejected
				r := request(subject, l, time.UnixMicro(base+st.at))
				r.Cost = st.cost
				want, err := mem.Apply(t.Context(), r)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Apply(t.Context(), r)
				if err != nil || got != want {
					t.Fatalf("%s step %d: redisstore %+v, %v; memstore %+v", subject, i, got, err, want)
				}
				wkey := stateKey(s.Key(subject, l), l)
				if n, err := c.Do(t.Context(), c.B().Hlen().Key(wkey).Build()).AsInt64(); err != nil || n > 2 {
					fields, _ := c.Do(t.Context(), c.B().Hgetall().Key(wkey).Build()).AsStrMap()
					t.Fatalf("%s step %d: the hash holds %v, %v; want at most two windows", subject, i, fields, err)
				}
			}
		}
	}
}
