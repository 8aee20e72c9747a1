package algorithm_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// zones lists the IANA zones of the system's tables (/usr/share/zoneinfo),
// or a handful of Go's embedded ones when there are none.
func zones(t testing.TB) []string {
	t.Helper()
	var names []string
	root := "/usr/share/zoneinfo"
	for _, area := range []string{"Africa", "America", "Antarctica", "Asia", "Atlantic", "Australia", "Europe", "Indian", "Pacific"} {
		filepath.WalkDir(filepath.Join(root, area), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				names = append(names, strings.TrimPrefix(p, root+"/"))
			}
			return nil
		})
	}
	if len(names) == 0 {
		names = []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Apia", "America/Santiago", "Asia/Kolkata"}
	}
	return names
}

func loadZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// refStart is the reference: the start date of the window of c that
// contains the local date of t, by the plain rules of the calendar (the
// anchor day, clamped to the month's last day), with nothing of the
// implementation's.
func refStartDate(c algorithm.Calendar, t time.Time) (int, time.Month, int) {
	y, m, d := t.Date()
	day := max(c.Day, 1)
	clamp := func(y int, m time.Month) (int, time.Month, int) {
		first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		last := first.AddDate(0, 1, -1).Day()
		return first.Year(), first.Month(), min(day, last)
	}
	switch c.Unit {
	case algorithm.CalendarWeek:
		for i := 0; i < 7; i++ {
			u := time.Date(y, m, d-i, 12, 0, 0, 0, time.UTC)
			if (int(u.Weekday())+6)%7+1 == day {
				return u.Date()
			}
		}
	case algorithm.CalendarMonth:
		if ay, am, ad := clamp(y, m); d >= ad {
			return ay, am, ad
		}
		return clamp(y, m-1)
	case algorithm.CalendarYear:
		mo := c.Month
		if mo == 0 {
			mo = time.January
		}
		ay, am, ad := clamp(y, mo)
		if m > am || m == am && d >= ad {
			return ay, am, ad
		}
		return clamp(y-1, mo)
	}
	return y, m, d
}

// TestCalendarWindowProperties checks Calendar.Window against Go's time
// package on random instants (1970-2100), zones, units and anchors: start
// <= t < end; the windows tile (the window of end starts at end, the
// window of the instant before start ends at start); the start is local
// midnight (00:00:00 on the wall clock, or the first instant of the day
// where a change of offset skips midnight) of the start date the plain
// calendar rules give, wherever the local date of t is not itself moved
// back by a change of offset.
func TestCalendarWindowProperties(t *testing.T) {
	t.Parallel()
	names := zones(t)
	rng := rand.New(rand.NewPCG(28, 1))
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	locs := map[string]*time.Location{}
	units := []algorithm.CalendarUnit{algorithm.CalendarDay, algorithm.CalendarWeek, algorithm.CalendarMonth, algorithm.CalendarYear}
	checkedMidnight := 0
	for i := range n {
		name := names[rng.IntN(len(names))]
		loc := locs[name]
		if loc == nil {
			loc = loadZone(t, name)
			locs[name] = loc
		}
		c := algorithm.Calendar{Unit: units[rng.IntN(len(units))], Location: loc}
		switch c.Unit {
		case algorithm.CalendarWeek:
			c.Day = rng.IntN(8)
		case algorithm.CalendarMonth:
			c.Day = rng.IntN(32)
		case algorithm.CalendarYear:
			c.Month, c.Day = time.Month(rng.IntN(13)), rng.IntN(32)
		}
		tt := time.UnixMicro(rng.Int64N(4_102_444_800_000_000))
		if i%4 == 0 { // near a midnight, where the edge cases are
			y, m, d := tt.In(loc).Date()
			tt = time.Date(y, m, d, 0, 0, 0, 0, loc).Add(time.Duration(rng.Int64N(7200_000_000)-3600_000_000) * time.Microsecond)
		}
		start, end := c.Window(tt)
		if tt.Before(start) || !tt.Before(end) {
			t.Fatalf("%s %+v: Window(%v) = [%v, %v), not containing it", name, c, tt, start, end)
		}
		if s2, _ := c.Window(end); !s2.Equal(end) {
			t.Fatalf("%s %+v: window after [%v, %v) starts at %v", name, c, start, end, s2)
		}
		if _, e0 := c.Window(start.Add(-time.Microsecond)); !e0.Equal(start) {
			t.Fatalf("%s %+v: window before [%v, %v) ends at %v", name, c, start, end, e0)
		}
		ls := start.In(loc)
		prev := start.Add(-time.Second).In(loc)
		if dateLess(prev, ls) == false {
			t.Fatalf("%s %+v: the second before start %v is on date %v, not an earlier one", name, c, ls, prev)
		}
		if h, mi, s := ls.Clock(); (h != 0 || mi != 0 || s != 0) && !isTransition(start) {
			t.Fatalf("%s %+v: start %v is not local midnight nor a change of offset", name, c, ls)
		}
		// The reference start date, where the local date of t is where the
		// plain calendar puts it (it only moves back across a change of
		// offset that repeats the end of a day, in a few historical zones).
		if dateLess(tt.In(loc).Add(-0), ls) {
			continue
		}
		y, m, d := refStartDate(c, tt.In(loc))
		if gy, gm, gd := ls.Date(); (gy != y || gm != m || gd != d) && !(isTransition(start) && skipped(loc, y, m, d)) {
			t.Fatalf("%s %+v: Window(%v) starts on %d-%02d-%02d, want %d-%02d-%02d", name, c, tt.In(loc), gy, gm, gd, y, m, d)
		}
		checkedMidnight++
	}
	if checkedMidnight < n*9/10 {
		t.Fatalf("only %d of %d instants checked against the reference dates", checkedMidnight, n)
	}
	t.Logf("%d instants in %d of %d zones: every window contains its instant and tiles with its neighbours; %d start dates equal the plain calendar's (the others: the local date moved back by a change of offset)",
		n, len(locs), len(names), checkedMidnight)
}

// dateLess reports whether a's local date is before b's.
func dateLess(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	if ay != by {
		return ay < by
	}
	if am != bm {
		return am < bm
	}
	return ad < bd
}

// isTransition reports whether the zone's offset changes at t.
func isTransition(t time.Time) bool {
	_, a := t.Zone()
	_, b := t.Add(-time.Second).Zone()
	return a != b
}

// skipped reports whether the date y-m-d has no instant in loc (a day
// that a zone skipped, as Samoa did on 2011-12-30).
func skipped(loc *time.Location, y int, m time.Month, d int) bool {
	u := time.Date(y, m, d, 12, 0, 0, 0, loc)
	uy, um, ud := u.Date()
	return uy != y || um != m || ud != d
}

// TestCalendarNewYork is the case of issue 28 worked by hand: a month in
// America/New_York, around the change to daylight saving time on
// 2026-03-08 and back on 2026-11-01.
func TestCalendarNewYork(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	day := func(s string) time.Time {
		u, err := time.ParseInLocation("2006-01-02 15:04", s, ny)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name       string
		c          algorithm.Calendar
		at         string
		start, end string
		hours      float64
	}{
		{"march", algorithm.Calendar{Unit: algorithm.CalendarMonth, Location: ny}, "2026-03-08 12:00", "2026-03-01 00:00", "2026-04-01 00:00", 31*24 - 1},
		{"november", algorithm.Calendar{Unit: algorithm.CalendarMonth, Location: ny}, "2026-11-30 23:59", "2026-11-01 00:00", "2026-12-01 00:00", 30*24 + 1},
		{"anchor 15th", algorithm.Calendar{Unit: algorithm.CalendarMonth, Location: ny, Day: 15}, "2026-03-14 23:59", "2026-02-15 00:00", "2026-03-15 00:00", 28*24 - 1},
		{"anchor 31st in april", algorithm.Calendar{Unit: algorithm.CalendarMonth, Location: ny, Day: 31}, "2026-05-01 08:00", "2026-04-30 00:00", "2026-05-31 00:00", 31 * 24},
		{"anchor 31st in february", algorithm.Calendar{Unit: algorithm.CalendarMonth, Location: ny, Day: 31}, "2026-03-01 08:00", "2026-02-28 00:00", "2026-03-31 00:00", 31*24 - 1},
		{"short day", algorithm.Calendar{Unit: algorithm.CalendarDay, Location: ny}, "2026-03-08 03:00", "2026-03-08 00:00", "2026-03-09 00:00", 23},
		{"long day", algorithm.Calendar{Unit: algorithm.CalendarDay, Location: ny}, "2026-11-01 01:30", "2026-11-01 00:00", "2026-11-02 00:00", 25},
		{"week from monday", algorithm.Calendar{Unit: algorithm.CalendarWeek, Location: ny}, "2026-03-08 12:00", "2026-03-02 00:00", "2026-03-09 00:00", 7*24 - 1},
		{"week from sunday", algorithm.Calendar{Unit: algorithm.CalendarWeek, Location: ny, Day: 7}, "2026-03-08 12:00", "2026-03-08 00:00", "2026-03-15 00:00", 7*24 - 1},
		{"year from march 15", algorithm.Calendar{Unit: algorithm.CalendarYear, Location: ny, Month: time.March, Day: 15}, "2026-03-14 12:00", "2025-03-15 00:00", "2026-03-15 00:00", 365 * 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, end := tc.c.Window(day(tc.at))
			if want := day(tc.start); !start.Equal(want) {
				t.Errorf("start = %v, want %v", start.In(ny), want)
			}
			if want := day(tc.end); !end.Equal(want) {
				t.Errorf("end = %v, want %v", end.In(ny), want)
			}
			if got := end.Sub(start).Hours(); got != tc.hours {
				t.Errorf("window lasts %v h, want %v", got, tc.hours)
			}
		})
	}
}

func TestWindowsPick(t *testing.T) {
	t.Parallel()
	w := algorithm.Windows{10, 20, 35, 50}
	for _, tc := range []struct {
		now, start, end int64
		ok              bool
	}{{9, 10, 20, false}, {10, 10, 20, true}, {19, 10, 20, true}, {20, 20, 35, true}, {49, 35, 50, true}, {50, 35, 50, false}} {
		if s, e, ok := w.Window(tc.now); s != tc.start || e != tc.end || ok != tc.ok {
			t.Errorf("Window(%d) = %d, %d, %v; want %d, %d, %v", tc.now, s, e, ok, tc.start, tc.end, tc.ok)
		}
	}
}
