package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
)

// newYork is the zone of the calendar cases, whose clocks change on
// 2026-03-08 (02:00 to 03:00) and 2026-11-01 (02:00 to 01:00).
func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatalf("time.LoadLocation: %v (the calendar cases need the IANA time zone tables)", err)
	}
	return loc
}

// localTime is the instant of the wall clock s ("2006-01-02 15:04:05.999999")
// in loc.
func localTime(t *testing.T, loc *time.Location, s string) time.Time {
	t.Helper()
	u, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// testCalendar checks calendar windows (floodgate.Calendar): a monthly
// quota in America/New_York that resets at local midnight on the 1st, and
// one anchored on the 15th, across both changes of daylight saving time,
// with every ResetAfter and RetryAfter the true end of the window as Go's
// time package computes it; reservations settled across the end of a
// window; and random instants near midnights against the model. With
// ServerTime only the window of the store's own time is checked.
func (s *suite) testCalendar(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	if s.opts.ServerTime {
		s.testCalendarServerTime(t, ny)
		return
	}
	t.Run("month", func(t *testing.T) {
		t.Parallel()
		l := floodgate.Limit{Limit: 1000, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}, Name: "monthly"}
		key := s.key(t, "tenant")
		at := func(wall string) time.Time { return localTime(t, ny, wall) }
		req := func(wall string, cost int64) floodgate.Request {
			return floodgate.Request{Key: key, Limit: l, Cost: cost, Now: at(wall)}
		}
		// February: 900 of 1000, the last microsecond of the month.
		s.expect(t, req("2026-02-28 23:59:59.999999", 900), want{allowed: true, remaining: 100, reset: time.Microsecond})
		s.expect(t, req("2026-02-28 23:59:59.999999", 101), want{remaining: 100, reset: time.Microsecond, retryAfter: time.Microsecond})
		// Midnight on 1 March in New York (05:00 UTC): a new window, of 31
		// days less the hour skipped on 8 March.
		march := at("2026-04-01 00:00:00").Sub(at("2026-03-01 00:00:00"))
		if march != 31*24*time.Hour-time.Hour {
			t.Fatalf("March 2026 in New York lasts %v, want 743h", march)
		}
		s.expect(t, req("2026-03-01 00:00:00", 1000), want{allowed: true, remaining: 0, reset: march})
		// After the change to daylight saving time: still March's window,
		// denied until local midnight on 1 April (04:00 UTC now).
		d := s.apply(t, req("2026-03-20 12:00:00", 1))
		if d.Allowed || !d.Now.Add(d.RetryAfter).Equal(at("2026-04-01 00:00:00")) {
			t.Fatalf("20 March: %+v, want denied until local midnight on 1 April", d)
		}
		s.expect(t, req("2026-03-31 23:59:59.999999", 1), want{remaining: 0, reset: time.Microsecond, retryAfter: time.Microsecond})
		s.expect(t, req("2026-04-01 00:00:00", 1), want{allowed: true, remaining: 999, reset: 30 * 24 * time.Hour})
		// November, 30 days and the hour repeated on 1 November.
		s.expect(t, req("2026-11-01 00:00:00", 1), want{allowed: true, remaining: 999, reset: 30*24*time.Hour + time.Hour})
	})
	t.Run("anchor_15", func(t *testing.T) {
		t.Parallel()
		l := floodgate.Limit{Limit: 10, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny, Day: 15}}
		key := s.key(t, "tenant")
		at := func(wall string) time.Time { return localTime(t, ny, wall) }
		req := func(wall string, cost int64) floodgate.Request {
			return floodgate.Request{Key: key, Limit: l, Cost: cost, Now: at(wall)}
		}
		// The window from 15 February to 15 March holds the change of 8
		// March: 28 days less an hour.
		s.expect(t, req("2026-02-20 09:00:00", 10), want{allowed: true, remaining: 0, reset: at("2026-03-15 00:00:00").Sub(at("2026-02-20 09:00:00"))})
		s.expect(t, req("2026-03-14 23:59:59.999999", 1), want{remaining: 0, reset: time.Microsecond, retryAfter: time.Microsecond})
		s.expect(t, req("2026-03-15 00:00:00", 1), want{allowed: true, remaining: 9, reset: 31 * 24 * time.Hour})
		// A 31st anchor clamps to the 30th of April.
		l31 := floodgate.Limit{Limit: 1, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny, Day: 31}}
		r31 := floodgate.Request{Key: s.key(t, "31st"), Limit: l31, Cost: 1, Now: at("2026-04-30 00:00:00")}
		s.expect(t, r31, want{allowed: true, remaining: 0, reset: 31 * 24 * time.Hour})
	})
	t.Run("reserve", func(t *testing.T) {
		t.Parallel()
		rv, ok := s.store.(floodgate.Reserver)
		if !ok {
			t.Skip("not a floodgate.Reserver")
		}
		l := floodgate.Limit{Limit: 1000, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}}
		key := s.key(t, "tenant")
		at := func(wall string) time.Time { return localTime(t, ny, wall) }
		// 600 held in October, settled at 100 in November: October's window
		// has ended, so nothing is given back to it, and November's owes
		// nothing; an excess in November is taken from November's.
		res := s.hold(t, rv, "cal-1", time.Hour, floodgate.Request{Key: key, Limit: l, Cost: 600, Now: at("2026-10-31 23:30:00")})
		if !res.Decisions[0].Allowed {
			t.Fatalf("reserve: %+v", res.Decisions[0])
		}
		st, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 600, Now: at("2026-11-01 00:10:00")}}, ID: "cal-1", Actual: 100})
		if err != nil {
			t.Fatalf("settle: %v", err)
		}
		if st[0].Refunded != 0 {
			t.Errorf("settle across the month's end refunded %d, want 0", st[0].Refunded)
		}
		s.expect(t, floodgate.Request{Key: key, Limit: l, Cost: 0, Now: at("2026-11-01 00:10:00")}, want{allowed: true, remaining: 1000})
		res = s.hold(t, rv, "cal-2", time.Hour, floodgate.Request{Key: key, Limit: l, Cost: 10, Now: at("2026-11-02 00:00:00")})
		if !res.Decisions[0].Allowed {
			t.Fatalf("reserve: %+v", res.Decisions[0])
		}
		if _, err := rv.Settle(t.Context(), floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 10, Now: at("2026-11-02 00:01:00")}}, ID: "cal-2", Actual: 50}); err != nil {
			t.Fatalf("settle: %v", err)
		}
		end := at("2026-12-01 00:00:00")
		now := at("2026-11-02 00:02:00")
		s.expect(t, floodgate.Request{Key: key, Limit: l, Cost: 0, Now: now}, want{allowed: true, remaining: 950, reset: end.Sub(now)})
	})
	t.Run("random", func(t *testing.T) {
		t.Parallel()
		s.calendarRandom(t, ny)
	})
}

// calendarRandom steps random limits of every unit and anchor at random
// instants near local midnights, forward in time, on the store and on the
// model (algorithm's Step with the windows of floodgate.Limit.ParamsAt),
// and checks every decision against the model and every window's end
// against Go's time package: a count's ResetAfter ends at local midnight
// of the next anchor day.
func (s *suite) calendarRandom(t *testing.T, ny *time.Location) {
	rng := rand.New(rand.NewPCG(28, 1))
	zones := []*time.Location{ny, time.UTC}
	if loc, err := time.LoadLocation("Australia/Lord_Howe"); err == nil {
		zones = append(zones, loc) // a change of 30 minutes
	}
	units := []floodgate.CalendarUnit{floodgate.CalendarDay, floodgate.CalendarWeek, floodgate.CalendarMonth, floodgate.CalendarYear}
	for seq := range rounds(12) {
		c := floodgate.Calendar{Unit: units[rng.IntN(len(units))], Location: zones[rng.IntN(len(zones))]}
		switch c.Unit {
		case floodgate.CalendarWeek:
			c.Day = rng.IntN(8)
		case floodgate.CalendarMonth:
			c.Day = rng.IntN(32)
		case floodgate.CalendarYear:
			c.Month, c.Day = time.Month(1+rng.IntN(12)), 1+rng.IntN(28)
		}
		l := floodgate.Limit{Limit: 1 + rng.Int64N(20), Calendar: c, CountRejected: rng.IntN(4) == 0}
		key := s.key(t, fmt.Sprint(seq))
		m := &model{st: algorithm.State{Kind: algorithm.KindFixedWindow}}
		now := time.Date(2026, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), 0, 0, 0, 0, c.Location)
		for range 40 {
			// Mostly within an hour of a midnight, sometimes days on.
			step := time.Duration(rng.Int64N(int64(2 * time.Hour)))
			if rng.IntN(4) == 0 {
				step = time.Duration(rng.Int64N(int64(40 * 24 * time.Hour)))
			}
			now = now.Add(step).Truncate(time.Microsecond)
			r := floodgate.Request{Key: key, Limit: l, Cost: rng.Int64N(l.Limit + 2), Now: now}
			got := s.apply(t, r)
			nowUS := now.UnixMicro()
			m.p = l.ParamsAt(nowUS)
			want := floodgate.FromAlgorithm(m.step(r, nowUS), nowUS)
			if got != want {
				t.Fatalf("seq %d, %v, %s at %v: got %+v, model %+v", seq, l, describe(r), now.In(c.Location), got, want)
			}
			if got.ResetAfter > 0 {
				_, end := c.Window(now)
				if ref := refWindowEnd(c, now); !end.Equal(ref) || !now.Add(got.ResetAfter).Equal(ref) {
					t.Fatalf("seq %d, %v at %v: window ends %v (ResetAfter %v), Go's time says %v", seq, c, now.In(c.Location), end, got.ResetAfter, ref.In(c.Location))
				}
			}
		}
	}
}

// refWindowEnd is where the window of c that contains t ends, by Go's
// time package alone: local midnight (time.Date) of the first anchor day
// after t's local date, for zones whose midnights all exist (New York,
// UTC and Lord Howe change their clocks at 02:00).
func refWindowEnd(c floodgate.Calendar, t time.Time) time.Time {
	loc := c.Location
	y, m, d := t.In(loc).Date()
	day := max(c.Day, 1)
	clamp := func(y int, m time.Month) time.Time {
		last := time.Date(y, m+1, 0, 0, 0, 0, 0, loc).Day()
		return time.Date(y, m, min(day, last), 0, 0, 0, 0, loc)
	}
	for i := 1; ; i++ {
		var next time.Time
		switch c.Unit {
		case floodgate.CalendarDay:
			next = time.Date(y, m, d+i, 0, 0, 0, 0, loc)
		case floodgate.CalendarWeek:
			next = time.Date(y, m, d+i, 0, 0, 0, 0, loc)
			if (int(next.Weekday())+6)%7+1 != day {
				continue
			}
		case floodgate.CalendarMonth:
			next = clamp(y, m+time.Month(i-1))
		case floodgate.CalendarYear:
			mo := max(c.Month, time.January)
			next = clamp(y+i-1, mo)
		}
		if next.After(t) {
			return next
		}
	}
}

// testCalendarServerTime checks a monthly window decided by the store's
// own clock: it contains the decision's Now and ends at the next local
// midnight on the 1st.
func (s *suite) testCalendarServerTime(t *testing.T, ny *time.Location) {
	l := floodgate.Limit{Limit: 1000, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}}
	d := s.apply(t, floodgate.Request{Key: s.key(t, "tenant"), Limit: l, Cost: 1})
	if !d.Allowed || d.Remaining != 999 {
		t.Fatalf("first request: %+v", d)
	}
	if ref := refWindowEnd(l.Calendar, d.Now); !d.Now.Add(d.ResetAfter).Equal(ref) {
		t.Fatalf("at %v the window ends %v, want %v", d.Now, d.Now.Add(d.ResetAfter), ref)
	}
}
