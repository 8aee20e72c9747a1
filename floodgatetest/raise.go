package floodgatetest

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// testRaise tests a floodgate.Raiser: a lost counter rebuilt, a counter
// behind raised, one ahead kept, a window that is not the current one
// left alone, and bad input. It skips a store that is no Raiser.
func (s *suite) testRaise(t *testing.T) {
	rs, ok := s.store.(floodgate.Raiser)
	if !ok {
		t.Skip("the store is not a floodgate.Raiser")
	}
	t.Parallel()
	l := s.limit(t, lim(floodgate.FixedWindow, 10, time.Minute))
	// The current window, as the store sees it.
	now := s.apply(t, floodgate.Request{Key: s.key(t, "clock"), Limit: l, Now: s.at(time.Second)}).Now
	period := l.Period.Microseconds()
	window := time.UnixMicro(now.UnixMicro() - now.UnixMicro()%period)
	raise := func(key string, units int64, w time.Time) floodgate.Decision {
		t.Helper()
		d, err := rs.Raise(t.Context(), floodgate.Request{Key: key, Limit: l, Cost: units, Now: s.at(time.Second)}, w)
		if err != nil {
			t.Fatalf("Raise(%s, %d): %v", key, units, err)
		}
		return d
	}
	lost := s.key(t, "lost")
	if d := raise(lost, 7, window); d.Remaining != 3 {
		t.Errorf("a lost counter raised to 7 of 10: %d remaining, want 3", d.Remaining)
	}
	if d := s.apply(t, floodgate.Request{Key: lost, Limit: l, Cost: 4, Now: s.at(time.Second)}); d.Allowed {
		t.Errorf("4 more after raising to 7 of 10: %+v, want denied", d)
	}
	ahead := s.key(t, "ahead")
	s.apply(t, floodgate.Request{Key: ahead, Limit: l, Cost: 5, Now: s.at(time.Second)})
	if d := raise(ahead, 2, window); d.Remaining != 5 {
		t.Errorf("a counter of 5 raised to 2: %d remaining, want 5 (never lowered)", d.Remaining)
	}
	if d := raise(ahead, 8, window); d.Remaining != 2 {
		t.Errorf("a counter of 5 raised to 8: %d remaining, want 2", d.Remaining)
	}
	if d := raise(s.key(t, "past"), 7, window.Add(-l.Period)); d.Remaining != 10 {
		t.Errorf("a raise of a window that has ended: %d remaining, want 10 (nothing)", d.Remaining)
	}
	for _, tc := range []struct {
		name string
		r    floodgate.Request
		w    time.Time
		want error
	}{
		{"not a fixed window", floodgate.Request{Key: lost, Limit: s.limit(t, lim(floodgate.GCRA, 10, time.Minute)), Cost: 1}, window, floodgate.ErrInvalidLimit},
		{"unaligned window", floodgate.Request{Key: lost, Limit: l, Cost: 1}, window.Add(time.Millisecond), floodgate.ErrInvalidRequest},
		{"no window", floodgate.Request{Key: lost, Limit: l, Cost: 1}, time.Time{}, floodgate.ErrInvalidRequest},
		{"negative units", floodgate.Request{Key: lost, Limit: l, Cost: -1}, window, floodgate.ErrInvalidRequest},
	} {
		if _, err := rs.Raise(t.Context(), tc.r, tc.w); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
