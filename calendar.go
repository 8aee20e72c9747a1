package floodgate

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/algorithm"
)

// CalendarUnit is the length of a calendar window, as config files and the
// HTTP API name it.
type CalendarUnit string

// The calendar units.
const (
	CalendarDay   CalendarUnit = "day"
	CalendarWeek  CalendarUnit = "week"
	CalendarMonth CalendarUnit = "month"
	CalendarYear  CalendarUnit = "year"
)

// Calendar makes a FixedWindow's windows periods of a calendar: days,
// weeks, months or years of a time zone, each starting at local midnight
// of its first day, which Day and Month anchor. The zero value is no
// calendar: windows of Period, aligned to the epoch or to the first hit.
//
//	floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: newYork, Day: 15}
//
// is a month from midnight on the 15th in New York to midnight on the next
// 15th: 744 hours in most months, 743 from 15 February to 15 March 2026,
// which skips an hour at 2:00 on 8 March. A window is always a whole
// number of the calendar's days, from one local midnight to another, and
// windows follow one another without a gap.
//
// The anchor, by Unit: a Day has none (Day and Month 0). A Week starts on
// the ISO weekday Day: 1 Monday (the default, also for 0) to 7 Sunday. A
// Month starts on the day Day of each month (1, the default, to 31); a day
// a month lacks is clamped to its last day, so a month anchored on the 31st
// runs 30 April to 31 May, then to 30 June. A Year starts on Day of Month
// (1 January by default); the 29th of February is the 28th in a common
// year. Where a change of offset skips midnight, a window starts at the
// first instant of its day (01:00 where clocks go from 00:00 to 01:00).
//
// A Calendar is a small value, safe to copy and to share; two are the same
// calendar when they are ==, the same Location pointer included (as
// time.LoadLocation returns a new one each call, load a zone once).
type Calendar struct {
	// Unit is the window: CalendarDay, CalendarWeek, CalendarMonth or
	// CalendarYear. Empty is no calendar.
	Unit CalendarUnit
	// Location is the time zone whose calendar and midnights the windows
	// follow; nil is UTC.
	Location *time.Location
	// Day is the anchor day: the ISO weekday a Week starts on (1 Monday to
	// 7 Sunday), the day of the month a Month starts on (1 to 31), or the
	// day of Month a Year starts on. 0 means 1.
	Day int
	// Month is the month a Year starts in; 0 means January. Only a Year
	// takes one.
	Month time.Month
}

// IsZero reports whether c is the zero Calendar, no calendar.
func (c Calendar) IsZero() bool { return c == Calendar{} }

// unit is c's algorithm.CalendarUnit; NoCalendar for an unknown one.
func (c Calendar) unit() algorithm.CalendarUnit {
	switch c.Unit {
	case CalendarDay:
		return algorithm.CalendarDay
	case CalendarWeek:
		return algorithm.CalendarWeek
	case CalendarMonth:
		return algorithm.CalendarMonth
	case CalendarYear:
		return algorithm.CalendarYear
	}
	return algorithm.NoCalendar
}

func (c Calendar) alg() algorithm.Calendar {
	return algorithm.Calendar{Unit: c.unit(), Location: c.Location, Month: c.Month, Day: c.Day}
}

// Window is the window of c that contains t: start <= t < end, both local
// midnights. For an invalid calendar (see Limit.Validate) it is [t, t).
func (c Calendar) Window(t time.Time) (start, end time.Time) {
	if c.problem() != "" {
		return t, t
	}
	return c.alg().Window(t)
}

// Windows is the window that contains nowUS (µs since the epoch), the
// one before and the one after, as the Windows a store passes to the
// step of a calendar limit (algorithm.Params.Calendar). c must be valid.
func (c Calendar) Windows(nowUS int64) algorithm.Windows {
	return c.alg().Windows(nowUS)
}

// zone is the name of c's Location, "UTC" for nil.
func (c Calendar) zone() string {
	if c.Location == nil {
		return "UTC"
	}
	return c.Location.String()
}

// Anchor is the text form of c's anchor, as ParseCalendar reads it: ""
// for the default (and for a Day), a weekday name ("monday") for a Week,
// the day ("15") for a Month, month and day ("03-15") for a Year.
func (c Calendar) Anchor() string {
	switch {
	case c.Unit == CalendarWeek && c.Day != 0:
		return strings.ToLower(time.Weekday(c.Day % 7).String())
	case c.Unit == CalendarMonth && c.Day != 0:
		return strconv.Itoa(c.Day)
	case c.Unit == CalendarYear && (c.Day != 0 || c.Month != 0):
		return fmt.Sprintf("%02d-%02d", max(int(c.Month), 1), max(c.Day, 1))
	}
	return ""
}

// String formats c as ParseCalendar's three arguments, space separated:
// "month America/New_York 15", "week UTC monday", "day Europe/Paris";
// "" for the zero Calendar.
func (c Calendar) String() string {
	if c.IsZero() {
		return ""
	}
	s := string(c.Unit) + " " + c.zone()
	if a := c.Anchor(); a != "" {
		s += " " + a
	}
	return s
}

// ParseCalendar makes the Calendar of a config file or an API request: the
// unit ("day", "week", "month", "year"), the IANA name of a time zone
// ("America/New_York"; "" or "UTC" for UTC) and the anchor, "" for the
// default: a weekday name or its ISO number for a week ("monday", "7"), a
// day of the month for a month ("15"), "MM-DD" for a year ("03-15"). Its
// errors wrap ErrInvalidLimit and name the field: "unit", "time_zone" or
// "anchor".
func ParseCalendar(unit, zone, anchor string) (Calendar, error) {
	c := Calendar{Unit: CalendarUnit(unit)}
	if c.unit() == algorithm.NoCalendar {
		return Calendar{}, fieldErr(ErrInvalidLimit, "unit", "%s is not a calendar unit (want day, week, month or year)", strconv.Quote(unit))
	}
	if zone != "" && zone != "UTC" {
		// "Local" would be each process's own zone, which two servers need
		// not share.
		if zone == "Local" || len(zone) > 64 || strings.ContainsAny(zone, "\x00\\") || strings.Contains(zone, "..") || strings.HasPrefix(zone, "/") {
			return Calendar{}, fieldErr(ErrInvalidLimit, "time_zone", "%s is not an IANA time zone name", strconv.Quote(zone))
		}
		loc, err := loadZone(zone)
		if err != nil {
			return Calendar{}, fieldErr(ErrInvalidLimit, "time_zone", "%s is not a known IANA time zone (%v)", strconv.Quote(zone), err)
		}
		c.Location = loc
	}
	if anchor == "" {
		return c, nil
	}
	bad := func(want string) (Calendar, error) {
		return Calendar{}, fieldErr(ErrInvalidLimit, "anchor", "%s is not an anchor of a %s (want %s)", strconv.Quote(anchor), unit, want)
	}
	switch c.Unit {
	case CalendarDay:
		return Calendar{}, fieldErr(ErrInvalidLimit, "anchor", "a day takes no anchor: it starts at local midnight")
	case CalendarWeek:
		for d := time.Sunday; d <= time.Saturday; d++ {
			if name := d.String(); strings.EqualFold(anchor, name) || strings.EqualFold(anchor, name[:3]) {
				c.Day = (int(d)+6)%7 + 1
				return c, nil
			}
		}
		n, err := strconv.Atoi(anchor)
		if err != nil || n < 1 || n > 7 {
			return bad("a weekday, monday to sunday, or its ISO number 1 to 7")
		}
		c.Day = n
	case CalendarMonth:
		n, err := strconv.Atoi(anchor)
		if err != nil || n < 1 || n > 31 {
			return bad("a day of the month, 1 to 31")
		}
		c.Day = n
	case CalendarYear:
		m, d, ok := strings.Cut(anchor, "-")
		mn, err1 := strconv.Atoi(m)
		dn, err2 := strconv.Atoi(d)
		if !ok || len(m) != 2 || len(d) != 2 || err1 != nil || err2 != nil || mn < 1 || mn > 12 || dn < 1 || dn > daysInLeap(time.Month(mn)) {
			return bad(`a month and day, "MM-DD", such as "03-15"`)
		}
		c.Month, c.Day = time.Month(mn), dn
	}
	return c, nil
}

// zones caches the zones ParseCalendar loaded, by name: time.LoadLocation
// reads the zone's file on every call and returns a new *time.Location,
// and two calendars of one zone are == only with the same pointer. It
// holds only names that loaded, of which there are a few hundred.
var zones sync.Map

func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	actual, _ := zones.LoadOrStore(name, loc)
	return actual.(*time.Location), nil
}

// daysInLeap is the number of days of month m in a leap year.
func daysInLeap(m time.Month) int {
	return time.Date(2024, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// problem is what is wrong with c as a Limit's calendar, "" if nothing.
func (c Calendar) problem() string {
	u := c.unit()
	switch {
	case u == algorithm.NoCalendar:
		return fmt.Sprintf("unknown calendar unit %s (want day, week, month or year)", strconv.Quote(string(c.Unit)))
	case u == algorithm.CalendarDay && (c.Day != 0 || c.Month != 0):
		return "a day takes no anchor (Day and Month 0): it starts at local midnight"
	case u != algorithm.CalendarYear && c.Month != 0:
		return fmt.Sprintf("a %s takes no Month (only a year does)", c.Unit)
	case u == algorithm.CalendarWeek && (c.Day < 0 || c.Day > 7):
		return fmt.Sprintf("week anchor Day %d is not an ISO weekday, 1 (Monday) to 7 (Sunday)", c.Day)
	case u == algorithm.CalendarMonth && (c.Day < 0 || c.Day > 31):
		return fmt.Sprintf("month anchor Day %d is not a day of a month, 1 to 31", c.Day)
	case u == algorithm.CalendarYear && (c.Month < 0 || c.Month > 12):
		return fmt.Sprintf("year anchor Month %d is not a month, 1 to 12", c.Month)
	case u == algorithm.CalendarYear && (c.Day < 0 || c.Day > daysInLeap(max(c.Month, time.January))):
		return fmt.Sprintf("year anchor Day %d is not a day of %v", c.Day, max(c.Month, time.January))
	}
	return ""
}
