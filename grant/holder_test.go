package grant

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/share"
)

func TestDemandMeasure(t *testing.T) {
	t.Parallel()
	type step struct {
		units   uint64
		elapsed time.Duration
		want    int64
	}
	for _, tc := range []struct {
		name   string
		period time.Duration
		steps  []step
	}{
		{"per period, then averaged", time.Second, []step{
			{50, 500 * time.Millisecond, 100}, // 50 in half a period: 100 per period
			{0, time.Second, 50},              // (100 + 0) / 2
			{300, time.Second, 175},           // (50 + 300) / 2
		}},
		{"no time span: the units are the measure", time.Second, []step{{7, 0, 7}, {9, 0, 8}}},
		{"no period: the units are the measure", 0, []step{{7, time.Second, 7}}},
		{"clamped to share.MaxDemand", time.Hour, []step{{1 << 62, time.Microsecond, share.MaxDemand}}},
		{"units clamped without a span", time.Second, []step{{1 << 63, 0, share.MaxDemand}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d Demand
			if d.Measured() {
				t.Fatal("zero Demand is measured")
			}
			for i, s := range tc.steps {
				if got := d.Measure(s.units, s.elapsed, tc.period); got != s.want || d.Rate != s.want {
					t.Errorf("step %d: Measure(%d, %v, %v) = %d (Rate %d), want %d", i, s.units, s.elapsed, tc.period, got, d.Rate, s.want)
				}
			}
			if !d.Measured() {
				t.Error("Demand not measured after Measure")
			}
		})
	}
}

func TestGrantTarget(t *testing.T) {
	t.Parallel()
	parties := []share.Party{{Demand: 10}, {Demand: 30}}
	for _, tc := range []struct {
		name   string
		g      Grant
		own    share.Party
		want   int64
		wantOK bool
	}{
		{"no grant yet", Grant{Self: -1}, share.Party{Demand: 1}, 0, false},
		{"zero value", Grant{}, share.Party{Demand: 1}, 0, false},
		{"self out of range", Grant{Parties: parties, Self: 2}, share.Party{Demand: 1}, 0, false},
		{"own demand replaces the reported one", Grant{Parties: parties, Self: 0}, share.Party{Demand: 30}, 50, true},
		{"as reported", Grant{Parties: parties, Self: 1}, share.Party{Demand: 30}, 75, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.g.Target(100, tc.own, share.Proportional)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Target = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if parties[0].Demand != 10 {
		t.Error("Target changed the grant's parties")
	}
}

func TestIncarnation(t *testing.T) {
	t.Parallel()
	a, b := Incarnation(), Incarnation()
	if len(a) != 12 || a == b {
		t.Errorf("Incarnation() = %q, %q: want 12 hex digits, new each time", a, b)
	}
}
