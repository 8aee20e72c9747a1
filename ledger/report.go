package ledger

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
)

// Format is the format of a report: CSV or JSON.
type Format string

const (
	// CSV writes a header line and one record per window, with the
	// columns of Columns.
	CSV Format = "csv"
	// JSON writes one array of objects, one per window, with the fields
	// named as the CSV columns; a key that is not valid UTF-8 is written
	// as key_base64 (standard encoding) instead of key.
	JSON Format = "json"
)

// Columns are the CSV columns and JSON fields of a report, in order:
// key; the quota (algorithm, limit, period as a Go duration, period_us,
// window alignment); window_start and window_end (RFC 3339 with
// fractional seconds, UTC); units; entries; first_at and last_at.
var Columns = []string{"key", "algorithm", "limit", "period", "period_us", "alignment",
	"window_start", "window_end", "units", "entries", "first_at", "last_at"}

// WriteReport writes every row of q (All) to w in format f, as it reads
// them: a report of any size uses the memory of one page. On an error the
// output is cut where the error came, and the error says so.
func WriteReport(ctx context.Context, w io.Writer, s Store, q Query, f Format) error {
	return writeReport(ctx, w, s, q, f, floodgate.Calendar{})
}

// WriteCalendarReport is WriteReport with a row per key and period of cal
// (a calendar month in New York, say), as an invoice counts: each
// recorded window counts in the period its start is in, and the row
// sums them (units, entries; first_at and last_at the earliest and the
// latest), with the quota of the latest window and, as the window, the
// period: alignment "calendar month America/New_York", window_start and
// window_end its local midnights. A durable quota on the same calendar
// has one window per period, which the row is.
func WriteCalendarReport(ctx context.Context, w io.Writer, s Store, q Query, f Format, cal floodgate.Calendar) error {
	if cal.IsZero() || (floodgate.Limit{Limit: 1, Calendar: cal}).Validate() != nil {
		return fmt.Errorf("ledger: WriteCalendarReport: %w", invalid("calendar", "%q is not a valid calendar", cal.String()))
	}
	return writeReport(ctx, w, s, q, f, cal)
}

// ByCalendar groups rows, in the order All yields them (by key, then
// window start), by key and the period of cal each window starts in: see
// WriteCalendarReport.
func ByCalendar(rows iter.Seq2[Usage, error], cal floodgate.Calendar) iter.Seq2[Usage, error] {
	return func(yield func(Usage, error) bool) {
		var cur Usage
		have := false
		for u, err := range rows {
			if err != nil {
				yield(Usage{}, err)
				return
			}
			start, end := cal.Window(u.Window.Start)
			w := Window{Start: start.UTC(), Period: end.Sub(start)}
			if have && cur.Key == u.Key && cur.Window == w {
				cur.Units += u.Units
				cur.Entries += u.Entries
				if u.First.Before(cur.First) {
					cur.First = u.First
				}
				if u.Last.After(cur.Last) {
					cur.Last, cur.Limit.Limit = u.Last, u.Limit.Limit
				}
				continue
			}
			if have && !yield(cur, nil) {
				return
			}
			cur, have = u, true
			cur.Window = w
			cur.Limit = floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: u.Limit.Limit, Calendar: cal}
		}
		if have {
			yield(cur, nil)
		}
	}
}

func writeReport(ctx context.Context, w io.Writer, s Store, q Query, f Format, cal floodgate.Calendar) error {
	if f != CSV && f != JSON {
		return fmt.Errorf("ledger: WriteReport: %w", invalid("format", "%q is not csv or json", f))
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("ledger: WriteReport: %w", err)
	}
	bw := bufio.NewWriter(w)
	rows := All(ctx, s, q)
	if !cal.IsZero() {
		rows = ByCalendar(rows, cal)
	}
	var err error
	if f == CSV {
		err = writeCSV(bw, rows)
	} else {
		err = writeJSON(bw, rows)
	}
	if err != nil {
		bw.Flush()
		return fmt.Errorf("ledger: WriteReport: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("ledger: WriteReport: %w", err)
	}
	return nil
}

func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func alignment(u Usage) string { return Alignment(u.Limit) }

func algorithmOf(u Usage) string { return string(u.Limit.EffectiveAlgorithm()) }

func writeCSV(w io.Writer, rows func(func(Usage, error) bool)) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(Columns); err != nil {
		return err
	}
	var failed error
	rows(func(u Usage, err error) bool {
		if err != nil {
			failed = err
			return false
		}
		failed = cw.Write([]string{u.Key, algorithmOf(u), strconv.FormatInt(u.Limit.Limit, 10),
			u.Window.Period.String(), strconv.FormatInt(u.Window.Period.Microseconds(), 10), alignment(u),
			timeText(u.Window.Start), timeText(u.Window.End()),
			strconv.FormatInt(u.Units, 10), strconv.FormatInt(u.Entries, 10),
			timeText(u.First), timeText(u.Last)})
		return failed == nil
	})
	cw.Flush()
	if failed != nil {
		return failed
	}
	return cw.Error()
}

// jsonRow is a report row in JSON; the field order is Columns'.
type jsonRow struct {
	Key         string `json:"key,omitempty"`
	KeyBase64   string `json:"key_base64,omitempty"`
	Algorithm   string `json:"algorithm"`
	Limit       int64  `json:"limit"`
	Period      string `json:"period"`
	PeriodUS    int64  `json:"period_us"`
	Alignment   string `json:"alignment"`
	WindowStart string `json:"window_start"`
	WindowEnd   string `json:"window_end"`
	Units       int64  `json:"units"`
	Entries     int64  `json:"entries"`
	FirstAt     string `json:"first_at"`
	LastAt      string `json:"last_at"`
}

func writeJSON(w io.Writer, rows func(func(Usage, error) bool)) error {
	if _, err := io.WriteString(w, "["); err != nil {
		return err
	}
	n := 0
	var failed error
	rows(func(u Usage, err error) bool {
		if err != nil {
			failed = err
			return false
		}
		r := jsonRow{Algorithm: algorithmOf(u), Limit: u.Limit.Limit,
			Period: u.Window.Period.String(), PeriodUS: u.Window.Period.Microseconds(), Alignment: alignment(u),
			WindowStart: timeText(u.Window.Start), WindowEnd: timeText(u.Window.End()),
			Units: u.Units, Entries: u.Entries, FirstAt: timeText(u.First), LastAt: timeText(u.Last)}
		if utf8.ValidString(u.Key) {
			r.Key = u.Key
		} else {
			r.KeyBase64 = base64.StdEncoding.EncodeToString([]byte(u.Key))
		}
		b, err := json.Marshal(r)
		if err != nil {
			failed = err
			return false
		}
		sep := ",\n"
		if n == 0 {
			sep = "\n"
		}
		n++
		if _, failed = io.WriteString(w, sep); failed == nil {
			_, failed = w.Write(b)
		}
		return failed == nil
	})
	if failed != nil {
		return failed
	}
	end := "\n]\n"
	if n == 0 {
		end = "]\n"
	}
	_, err := io.WriteString(w, end)
	return err
}
