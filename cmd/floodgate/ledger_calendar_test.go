package main

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
)

// calendarBilling is a monthly durable quota in New York (windows from
// local midnight on the 1st) and a daily aligned one whose UTC days
// straddle the New York months.
func calendarBilling(t *testing.T) []ledger.Entry {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	monthly := floodgate.Limit{Limit: 10000, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}}
	daily := floodgate.Limit{Limit: 1000, Period: 24 * time.Hour}
	dec := time.Date(2026, 12, 1, 0, 0, 0, 0, ny)
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, ny)
	utcDec1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) // 30 November, 19:00 in New York
	return []ledger.Entry{
		{Key: "d|billing|tenant=acme", Limit: monthly, Window: nov, Units: 5, ID: "n1", At: nov.Add(time.Hour)},
		{Key: "d|billing|tenant=acme", Limit: monthly, Window: dec, Units: 700, ID: "r1", At: dec.Add(9 * time.Hour)},
		{Key: "d|billing|tenant=acme", Limit: monthly, Window: dec, Units: 50, ID: "r2", At: dec.Add(20 * 24 * time.Hour)},
		{Key: "d|billing|tenant=globex", Limit: daily, Window: utcDec1, Units: 20, ID: "g1", At: utcDec1.Add(time.Hour)},
		{Key: "d|billing|tenant=globex", Limit: daily, Window: utcDec1.Add(24 * time.Hour), Units: 30, ID: "g2", At: utcDec1.Add(25 * time.Hour)},
		{Key: "d|billing|tenant=globex", Limit: daily, Window: utcDec1.Add(48 * time.Hour), Units: 1, ID: "g3", At: utcDec1.Add(49 * time.Hour)},
	}
}

func TestLedgerReportCalendar(t *testing.T) {
	testLedgerReportCalendar(t, sqliteLedger(t, calendarBilling(t)...))
}

func TestLedgerReportCalendarPostgres(t *testing.T) {
	url := pgtest.Database(t)
	l, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(t.Context(), calendarBilling(t)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	testLedgerReportCalendar(t, url)
}

// testLedgerReportCalendar: the bill for December in New York. The
// monthly quota's window is the row as recorded (its alignment the
// calendar); by -period month the daily windows that start in December
// in New York (from 1 December 05:00 UTC) add up into one row, and the
// one that starts on 30 November New York time is November's.
func testLedgerReportCalendar(t *testing.T, spec string) {
	code, out, errOut := runCmd(t, "ledger", "report", "-ledger", spec, "-from", "2026-12-01", "-to", "2027-01-01", "-time-zone", "America/New_York", "-period", "month")
	want := `key,algorithm,limit,period,period_us,alignment,window_start,window_end,units,entries,first_at,last_at
d|billing|tenant=acme,fixed_window,10000,744h0m0s,2678400000000,calendar month America/New_York,2026-12-01T05:00:00Z,2027-01-01T05:00:00Z,750,2,2026-12-01T14:00:00Z,2026-12-21T05:00:00Z
d|billing|tenant=globex,fixed_window,1000,744h0m0s,2678400000000,calendar month America/New_York,2026-12-01T05:00:00Z,2027-01-01T05:00:00Z,31,2,2026-12-02T01:00:00Z,2026-12-03T01:00:00Z
`
	if code != 0 || out != want {
		t.Errorf("report by month: exit %d\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	// Without -period, the recorded windows: the calendar quota's is
	// already the month.
	code, out, errOut = runCmd(t, "ledger", "report", "-ledger", spec, "-key", "d|billing|tenant=acme", "-from", "2026-11-15")
	want = `key,algorithm,limit,period,period_us,alignment,window_start,window_end,units,entries,first_at,last_at
d|billing|tenant=acme,fixed_window,10000,744h0m0s,2678400000000,calendar month America/New_York,2026-12-01T05:00:00Z,2027-01-01T05:00:00Z,750,2,2026-12-01T14:00:00Z,2026-12-21T05:00:00Z
`
	if code != 0 || out != want {
		t.Errorf("report: exit %d\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	for _, bad := range [][]string{
		{"-period", "fortnight"},
		{"-period", "month", "-time-zone", "Mars/Olympus"},
		{"-period", "month", "-anchor", "32"},
		{"-time-zone", "UTC"},
	} {
		code, _, errOut := runCmd(t, append([]string{"ledger", "report", "-ledger", spec}, bad...)...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a problem", bad, code, errOut)
		}
	}
}
