package algorithm

import "time"

// CalendarUnit is the length of a calendar window: a day, a week, a month
// or a year of a time zone's calendar. The zero value is no calendar.
type CalendarUnit uint8

// The calendar units.
const (
	NoCalendar CalendarUnit = iota
	CalendarDay
	CalendarWeek
	CalendarMonth
	CalendarYear
)

// Calendar is a sequence of calendar windows that tile time: every window
// starts at local midnight, in Location, of its start date, and ends where
// the next starts. The start dates are every day (CalendarDay), every
// week on the ISO weekday Day (1 Monday ... 7 Sunday; 0 means 1), every
// month on the day Day (1 to 31; 0 means 1), or every year on Month and
// Day (0 means January and 1). A day that a month or a year lacks (the
// 31st of April, the 29th of February of a common year) is clamped to the
// month's last day: a month anchored on the 31st runs from the 30th of
// April to the 31st of May.
//
// Local midnight is the first instant whose date in Location is the start
// date: 01:00 where the clock skips from midnight to 01:00, the first of
// the two midnights where it falls back across one. So a day lasts 23 or
// 25 hours across a change of daylight saving time, and a month lasts one
// hour less or more. A nil Location is UTC.
type Calendar struct {
	Unit     CalendarUnit
	Location *time.Location
	Month    time.Month
	Day      int
}

// civil is a date of the proleptic Gregorian calendar, normalized.
type civil struct {
	y int
	m time.Month
	d int
}

func dateOf(t time.Time) civil {
	y, m, d := t.Date()
	return civil{y, m, d}
}

// norm normalizes y, m, d as time.Date does (the 32nd of January is the
// 1st of February).
func norm(y int, m time.Month, d int) civil {
	return dateOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC))
}

func (a civil) before(b civil) bool {
	if a.y != b.y {
		return a.y < b.y
	}
	if a.m != b.m {
		return a.m < b.m
	}
	return a.d < b.d
}

// daysIn is the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// clamped is the day d of month m of year y, or the month's last day if
// it has fewer than d days.
func clamped(y int, m time.Month, d int) civil {
	c := norm(y, m, 1) // normalizes the month
	return civil{c.y, c.m, min(d, daysIn(c.y, c.m))}
}

func (c Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

func (c Calendar) day() int { return max(c.Day, 1) }
func (c Calendar) month() time.Month {
	if c.Month == 0 {
		return time.January
	}
	return c.Month
}

// first is the start date of the window whose start date is at or before
// date a and whose successor's is after it.
func (c Calendar) first(a civil) civil {
	switch c.Unit {
	case CalendarWeek:
		iso := (int(time.Date(a.y, a.m, a.d, 0, 0, 0, 0, time.UTC).Weekday())+6)%7 + 1
		return norm(a.y, a.m, a.d-(iso-c.day()+7)%7)
	case CalendarMonth:
		if s := clamped(a.y, a.m, c.day()); !a.before(s) {
			return s
		}
		return clamped(a.y, a.m-1, c.day())
	case CalendarYear:
		if s := clamped(a.y, c.month(), c.day()); !a.before(s) {
			return s
		}
		return clamped(a.y-1, c.month(), c.day())
	}
	return a
}

// next is the start date of the window after the one that starts on s,
// a start date; prev the one before.
func (c Calendar) next(s civil) civil { return c.shift(s, 1) }
func (c Calendar) prev(s civil) civil { return c.shift(s, -1) }

func (c Calendar) shift(s civil, n int) civil {
	switch c.Unit {
	case CalendarWeek:
		return norm(s.y, s.m, s.d+7*n)
	case CalendarMonth:
		return clamped(s.y, s.m+time.Month(n), c.day())
	case CalendarYear:
		return clamped(s.y+n, c.month(), c.day())
	}
	return norm(s.y, s.m, s.d+n)
}

// midnight is the first instant whose date in loc is a or later. time.Date
// gives a wall clock that a change of offset skips or repeats one of its
// instants; the first instant of the day may be in the zone period before
// that one, which the loop looks at (a zone period starts and ends on a
// whole second).
func midnight(a civil, loc *time.Location) time.Time {
	u := time.Date(a.y, a.m, a.d, 0, 0, 0, 0, loc)
	// Where midnight is skipped, time.Date may answer with the wall clock
	// moved back, on the day before: the day starts where the zone period
	// of u ends.
	for i := 0; i < 4 && dateOf(u).before(a); i++ {
		_, ze := u.ZoneBounds()
		if ze.IsZero() {
			break
		}
		u = ze
	}
	wall := time.Date(a.y, a.m, a.d, 0, 0, 0, 0, time.UTC).Unix()
	for range 4 {
		zs, _ := u.ZoneBounds()
		if zs.IsZero() || zs.After(u) {
			break
		}
		p := zs.Add(-time.Second)
		if dateOf(p).before(a) {
			break
		}
		// The zone period before u's already has dates at or after a: the
		// day starts in it, at its midnight, or at its start if that is
		// later.
		_, off := p.Zone()
		cand := time.Unix(wall-int64(off), 0).In(loc)
		if ps, _ := p.ZoneBounds(); !ps.IsZero() && cand.Before(ps) {
			cand = ps
		}
		if !cand.Before(u) {
			break
		}
		u = cand
	}
	return u
}

// Window is the window that contains t: start <= t < end, both local
// midnights of start dates of c, consecutive.
func (c Calendar) Window(t time.Time) (start, end time.Time) {
	loc := c.loc()
	s := c.first(dateOf(t.In(loc)))
	start = midnight(s, loc)
	// Where the local date goes backwards across a change of offset, t
	// can be before the midnight of its own date's window: step back, and
	// forward where t is at or after the next one. Each loop ends within
	// a step or two; the bound keeps it finite on any zone table.
	for i := 0; i < 8 && start.After(t); i++ {
		s = c.prev(s)
		start = midnight(s, loc)
	}
	n := c.next(s)
	end = midnight(n, loc)
	for i := 0; i < 8 && !end.After(t); i++ {
		s, start = n, end
		n = c.next(s)
		end = midnight(n, loc)
	}
	return start, end
}

// Windows is the Windows around nowUS (µs since the epoch): the window
// that contains it, the one before and the one after.
func (c Calendar) Windows(nowUS int64) Windows {
	start, end := c.Window(time.UnixMicro(nowUS))
	prev, _ := c.Window(start.Add(-time.Microsecond))
	_, next := c.Window(end)
	return Windows{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// Windows are three consecutive calendar windows as their four bounds, in
// µs since the epoch: [W[0], W[1]), [W[1], W[2]) and [W[2], W[3]), W[0] <
// W[1] < W[2] < W[3]. A store computes them in Go, where the time zone
// tables are, around its own clock, and passes them to the step, which
// takes the window that contains its now: a Lua script that reads the
// Redis server's clock finds its window among the three as long as the
// two clocks are less than a window apart.
type Windows [4]int64

// Window is the window of w that contains now, and ok; the first window
// for a now before them and the last one for a now after them, with ok
// false.
func (w *Windows) Window(now int64) (start, end int64, ok bool) {
	switch {
	case now < w[0]:
		return w[0], w[1], false
	case now < w[1]:
		return w[0], w[1], true
	case now < w[2]:
		return w[1], w[2], true
	case now < w[3]:
		return w[2], w[3], true
	}
	return w[2], w[3], false
}

// MaxCalendarPeriod is the longest window of unit, in µs: an upper bound
// that no zone's window reaches (a day of 48 hours, a week of 8 days, a
// month of 32, a year of 367), which Params.Period holds for a calendar
// limit.
func MaxCalendarPeriod(unit CalendarUnit) int64 {
	const day = 24 * 3600 * 1_000_000
	switch unit {
	case CalendarDay:
		return 2 * day
	case CalendarWeek:
		return 8 * day
	case CalendarMonth:
		return 32 * day
	case CalendarYear:
		return 367 * day
	}
	return 0
}
