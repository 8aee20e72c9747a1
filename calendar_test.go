package floodgate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// TestCalendarRules: what a calendar limit may not be, each refused with
// the field it is about.
func TestCalendarRules(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	month := floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}
	for _, tc := range []struct {
		name  string
		l     floodgate.Limit
		field string
		msg   string
	}{
		{"ok", floodgate.Limit{Limit: 1, Calendar: month, Durable: true}, "", ""},
		{"period", floodgate.Limit{Limit: 1, Period: time.Hour, Calendar: month}, "period", "takes no period"},
		{"algorithm", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 1, Calendar: month}, "calendar", "only a fixed_window"},
		{"first_hit", floodgate.Limit{Limit: 1, Calendar: month, Window: floodgate.FirstHit}, "window", "not at the first hit"},
		{"local_budget", floodgate.Limit{Limit: 10, Calendar: month, LocalBudget: 2}, "local_budget", "takes no local_budget"},
		{"global", floodgate.Limit{Limit: 1, Calendar: month, Global: true}, "global", "cannot be global"},
		{"unit", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: "fortnight"}}, "calendar", "unknown calendar unit"},
		{"day anchor", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarDay, Day: 2}}, "calendar", "a day takes no anchor"},
		{"month day", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Day: 32}}, "calendar", "not a day of a month"},
		{"week day", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarWeek, Day: 8}}, "calendar", "not an ISO weekday"},
		{"year month", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarYear, Month: 13}}, "calendar", "not a month"},
		{"year feb 30", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarYear, Month: 2, Day: 30}}, "calendar", "not a day of February"},
		{"month takes no month", floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Month: 3}}, "calendar", "takes no Month"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			fe, ok := errors.AsType[*floodgate.FieldError](err)
			if !ok || !errors.Is(err, floodgate.ErrInvalidLimit) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate() = %v, want field %s: %s", err, tc.field, tc.msg)
			}
		})
	}
}

// TestParseCalendar reads the text forms and writes them back.
func TestParseCalendar(t *testing.T) {
	for _, tc := range []struct{ unit, zone, anchor, want, err string }{
		{"month", "America/New_York", "15", "month America/New_York 15", ""},
		{"week", "", "Sun", "week UTC sunday", ""},
		{"week", "UTC", "1", "week UTC monday", ""},
		{"year", "Europe/Paris", "02-29", "year Europe/Paris 02-29", ""},
		{"day", "Asia/Kolkata", "", "day Asia/Kolkata", ""},
		{"hour", "", "", "", "unit"},
		{"month", "Mars/Olympus", "", "", "time_zone"},
		{"month", "../../../etc/passwd", "", "", "time_zone"},
		{"month", "Local", "", "", "time_zone"},
		{"month", "", "0", "", "anchor"},
		{"year", "", "2-3", "", "anchor"},
		{"day", "", "1", "", "anchor"},
	} {
		c, err := floodgate.ParseCalendar(tc.unit, tc.zone, tc.anchor)
		if tc.err != "" {
			fe, ok := errors.AsType[*floodgate.FieldError](err)
			if !ok || fe.Field != tc.err {
				t.Errorf("ParseCalendar(%q, %q, %q) = %v, want an error naming %s", tc.unit, tc.zone, tc.anchor, err, tc.err)
			}
			continue
		}
		if err != nil || c.String() != tc.want {
			t.Errorf("ParseCalendar(%q, %q, %q) = %q, %v; want %q", tc.unit, tc.zone, tc.anchor, c.String(), err, tc.want)
		}
		f := strings.Fields(c.String())
		f = append(f, "")
		back, err := floodgate.ParseCalendar(f[0], f[1], f[2])
		if err != nil || back != c {
			t.Errorf("%q read back as %v, %v", c.String(), back, err)
		}
	}
}

// FuzzParseCalendar: any text is a Calendar that Validate accepts and
// that reads back from its String, or an error naming a field; never a
// panic.
func FuzzParseCalendar(f *testing.F) {
	for _, s := range [][3]string{{"month", "America/New_York", "15"}, {"week", "", "sunday"}, {"year", "UTC", "02-29"}, {"day", "Europe/Paris", ""}, {"month", "../x", "31"}, {"year", "", "13-01"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, unit, zone, anchor string) {
		c, err := floodgate.ParseCalendar(unit, zone, anchor)
		if err != nil {
			if _, ok := errors.AsType[*floodgate.FieldError](err); !ok {
				t.Fatalf("error without a field: %v", err)
			}
			return
		}
		if err := (floodgate.Limit{Limit: 1, Calendar: c}).Validate(); err != nil {
			t.Fatalf("%q parsed to an invalid calendar: %v", c.String(), err)
		}
		now := time.Date(2026, 3, 8, 7, 30, 0, 0, time.UTC)
		if s, e := c.Window(now); now.Before(s) || !now.Before(e) {
			t.Fatalf("%q: window [%v, %v) does not hold %v", c.String(), s, e, now)
		}
	})
}
