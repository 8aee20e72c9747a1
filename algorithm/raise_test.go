package algorithm

import "testing"

func TestRaise(t *testing.T) {
	p := Params{Limit: 10, Period: sec}
	live := FixedWindow{Start: t0, Count: 4}
	for _, tc := range []struct {
		name  string
		s     FixedWindow
		p     Params
		now   int64
		start int64
		units int64
		want  FixedWindow
	}{
		{"lost counter rebuilt", FixedWindow{}, p, t0 + 500*ms, t0, 7, FixedWindow{Start: t0, Count: 7}},
		{"behind: raised", live, p, t0 + 500*ms, t0, 7, FixedWindow{Start: t0, Count: 7}},
		{"ahead: kept", live, p, t0 + 500*ms, t0, 2, live},
		{"window over", FixedWindow{}, p, t0 + sec, t0, 7, FixedWindow{}},
		{"window not begun", FixedWindow{}, p, t0 - 1, t0, 7, FixedWindow{}},
		{"expired state replaced", FixedWindow{Start: t0 - sec, Count: 9}, p, t0 + 1, t0, 3, FixedWindow{Start: t0, Count: 3}},
		{"another live window raised in place", FixedWindow{Start: t0 + 100*ms, Count: 2}, Params{Limit: 10, Period: sec, FirstHit: true}, t0 + 500*ms, t0, 7, FixedWindow{Start: t0 + 100*ms, Count: 7}},
		{"capped at limit+1", FixedWindow{}, p, t0, t0, 1000, FixedWindow{Start: t0, Count: 11}},
		{"nothing to raise", live, p, t0, t0, 0, live},
	} {
		if got := tc.s.Raise(tc.p, tc.now, tc.start, tc.units); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// A raised counter denies what the record says is used.
	s := FixedWindow{}.Raise(p, t0+ms, t0, 9)
	if _, d := s.Step(p, t0+2*ms, 2); d.Allowed || d.Remaining != 1 {
		t.Errorf("after raising to 9 of 10, 2 more: %+v, want denied with 1 remaining", d)
	}
}
