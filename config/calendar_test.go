package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// TestCalendarRules reads calendar windows from YAML: time_zone and anchor
// beside unit make a floodgate.Calendar; without them, unit keeps
// upstream's fixed length.
func TestCalendarRules(t *testing.T) {
	c, err := config.Load("testdata/floodgate/calendar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]floodgate.Limit{}
	for _, r := range c.Domain("billing").Rules() {
		got[r.Path[0].Key+"="+r.Path[0].Value] = r.Limit
	}
	ny, _ := time.LoadLocation("America/New_York")
	for _, tc := range []struct {
		rule          string
		cal           string
		period        time.Duration
		durable       bool
		windowEndsAt  string // of the window holding 2026-03-10 12:00 UTC
		windowStartAt string
	}{
		{"tenant=acme", "month America/New_York", 0, true, "2026-04-01T00:00:00-04:00", "2026-03-01T00:00:00-05:00"},
		{"tenant=globex", "month America/New_York 15", 0, false, "2026-03-15T00:00:00-04:00", "2026-02-15T00:00:00-05:00"},
		{"team=", "week Europe/Berlin sunday", 0, false, "2026-03-15T00:00:00+01:00", "2026-03-08T00:00:00+01:00"},
		{"org=", "year UTC 04-01", 0, false, "2026-04-01T00:00:00Z", "2025-04-01T00:00:00Z"},
		{"legacy=", "", 30 * 24 * time.Hour, false, "", ""},
	} {
		l, ok := got[tc.rule]
		if !ok {
			t.Fatalf("no rule %s in %v", tc.rule, got)
		}
		if l.Calendar.String() != tc.cal || l.Period != tc.period || l.Durable != tc.durable {
			t.Errorf("%s: calendar %q period %v durable %v; want %q, %v, %v", tc.rule, l.Calendar.String(), l.Period, l.Durable, tc.cal, tc.period, tc.durable)
		}
		if tc.cal == "" {
			continue
		}
		start, end := l.Calendar.Window(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
		if ws, _ := time.Parse(time.RFC3339, tc.windowStartAt); !start.Equal(ws) {
			t.Errorf("%s: window starts %v, want %v", tc.rule, start.In(ny), ws)
		}
		if we, _ := time.Parse(time.RFC3339, tc.windowEndsAt); !end.Equal(we) {
			t.Errorf("%s: window ends %v, want %v", tc.rule, end.In(ny), we)
		}
	}
}

// TestCalendarErrors: each bad calendar field is one error at its line.
func TestCalendarErrors(t *testing.T) {
	err := config.Validate("testdata/invalid/calendar.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`calendar.yaml:4:64: descriptors[0].rate_limit.time_zone: "Mars/Olympus" is not a known IANA time zone`,
		`calendar.yaml:6:61: descriptors[1].rate_limit.anchor: "32" is not an anchor of a month (want a day of the month, 1 to 31)`,
		`calendar.yaml:8:54: descriptors[2].rate_limit.time_zone: a calendar window needs a unit: day, week, month or year (not a period)`,
		`calendar.yaml:10:24: descriptors[3].rate_limit.unit: "hour" is not a calendar unit (want day, week, month or year)`,
		`calendar.yaml:12:75: descriptors[4].rate_limit.anchor: a day takes no anchor: it starts at local midnight`,
		`calendar.yaml:14:77: descriptors[5].rate_limit.window: a calendar window starts at local midnight of its anchor day, not at the first hit`,
		`calendar.yaml:16:64: descriptors[6].rate_limit.time_zone: only a fixed_window takes calendar windows, not gcra`,
		`calendar.yaml:18:60: descriptors[7].rate_limit.anchor: "02-30" is not an anchor of a year`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("missing %q in\n%s", w, msg)
		}
	}
	if n := len(config.Errors(err)); n != len(want) {
		t.Errorf("%d problems, want %d:\n%s", n, len(want), msg)
	}
}
