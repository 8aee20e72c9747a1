package config

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestRateLimits checks that a rate_limits list gives a rule every limit
// in file order, Limit the first, and that replaces may name any of them.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/floodgate/limits_plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Match("api", []Entry{{"tenant", "acme"}})
	if r == nil {
		t.Fatal("no rule for tenant")
	}
	if got, want := len(r.Limits), 2; got != want {
		t.Fatalf("%d limits, want %d", got, want)
	}
	if r.Limits[0].Period != time.Second || r.Limits[0].Limit != 10 || r.Limits[1].Period != 24*time.Hour || r.Limits[1].Limit != 10000 {
		t.Errorf("limits %v", r.Limits)
	}
	if r.Limit != r.Limits[0] {
		t.Errorf("Limit %v, want the first of Limits %v", r.Limit, r.Limits[0])
	}
	if got, want := r.Line, 6; got != want {
		t.Errorf("line %d, want %d", got, want)
	}
	one := c.Match("api", []Entry{{"api_key", "k"}})
	if one.Limits[0].Algorithm != floodgate.GCRA || one.Limits[0].Burst != 10 {
		t.Errorf("api_key's first limit %v", one.Limits[0])
	}
	pro := c.Domain("api").Plan("pro")
	if pro == nil || len(pro.Limits) != 2 || pro.Limits[1].Limit != 10000 || pro.Line != 20 {
		t.Fatalf("plan pro: %+v", pro)
	}
	if c.Domain("api").Plan("gold") != nil {
		t.Error("a plan that is not in the file")
	}
	if got := len(c.Domain("api").Plans()); got != 2 {
		t.Errorf("%d plans, want 2", got)
	}
}

// TestRateLimitsReplaces checks that a rule replacing the name of the
// second limit of a list replaces the whole rule.
func TestRateLimitsReplaces(t *testing.T) {
	t.Parallel()
	d, err := Parse("r.yaml", []byte(`domain: d
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: day, requests_per_unit: 50, name: daily}
  - key: vip
    rate_limit: {unit: second, requests_per_unit: 500, replaces: [{name: daily}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	ms := c.MatchAll("d", [][]Entry{{{"user", "u"}}, {{"vip", "v"}}})
	if ms[0].ReplacedBy == nil || ms[0].ReplacedBy != ms[1].Rule {
		t.Errorf("user's rule not replaced by vip's: %+v", ms[0])
	}
}

// TestRateLimitsErrors checks each problem of a list or a plan is
// reported at its line with its field.
func TestRateLimitsErrors(t *testing.T) {
	t.Parallel()
	err := Validate("testdata/invalid/rate_limits.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"rate_limits.yaml:5:5: descriptors[0].rate_limits: give rate_limit or rate_limits, not both",
		"rate_limits.yaml:7:18: descriptors[1].rate_limits: rate_limits needs at least one limit",
		"rate_limits.yaml:11:9: descriptors[2].rate_limits[1]: same algorithm (fixed_window) and period (1s) as item 0",
		"rate_limits.yaml:14:9: descriptors[3].rate_limits[0].unlimited: an item of rate_limits cannot be unlimited",
		"rate_limits.yaml:18:9: descriptors[4].rate_limits[1].failure_mode: failure_mode fail_closed, but item 0 says fail_open",
		"rate_limits.yaml:21:9: descriptors[5].rate_limits[0].algorithm: a concurrency limit",
		"rate_limits.yaml:23:18: descriptors[6].rate_limits: want a list of limits",
		`rate_limits.yaml:25:3: plans.bad name: plan name "bad name": only letters`,
		"rate_limits.yaml:28:7: plans.pro[0].failure_mode: a plan takes no failure_mode",
		"rate_limits.yaml:29:10: plans.empty: a plan needs at least one limit",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("missing %q in:\n%s", want, all)
		}
	}
}

// TestCheckLimits checks the rules of an override's limits.
func TestCheckLimits(t *testing.T) {
	t.Parallel()
	sec := floodgate.Limit{Limit: 10, Period: time.Second}
	day := floodgate.Limit{Limit: 100, Period: 24 * time.Hour}
	calendar := func(unit, zone string) floodgate.Limit {
		c, err := floodgate.ParseCalendar(unit, zone, "")
		if err != nil {
			t.Fatal(err)
		}
		return floodgate.Limit{Limit: 100, Calendar: c}
	}
	for _, tc := range []struct {
		name   string
		limits []floodgate.Limit
		field  string
	}{
		{"ok", []floodgate.Limit{sec, day}, ""},
		{"empty", nil, "limits"},
		{"too many", make([]floodgate.Limit, MaxLimits+1), "limits"},
		{"invalid", []floodgate.Limit{sec, {Limit: -1, Period: time.Second}}, "limits[1]"},
		{"same counter", []floodgate.Limit{sec, day, {Limit: 3, Period: time.Second}}, "limits[2]"},
		// Calendar windows have no period: their unit tells their
		// counters apart, and a zone does not (the key is the unit's).
		{"calendar day and month", []floodgate.Limit{sec, calendar("day", "America/New_York"), calendar("month", "America/New_York")}, ""},
		{"calendar same unit", []floodgate.Limit{calendar("month", "America/New_York"), calendar("month", "Europe/Berlin")}, "limits[1]"},
		{"concurrency", []floodgate.Limit{{Algorithm: floodgate.Concurrency, Limit: 3, Period: time.Minute}}, "limits[0].algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckLimits(tc.limits)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe, ok := err.(*floodgate.FieldError)
			if !ok || fe.Field != tc.field {
				t.Fatalf("error %v, want one of field %s", err, tc.field)
			}
		})
	}
}
