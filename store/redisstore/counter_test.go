package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
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
