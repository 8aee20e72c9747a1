package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// MaxKeyLen is the longest Entry.Key, in bytes. It is shorter than
// floodgate.MaxKeyLen (1 MiB) because a ledger indexes its keys (a
// PostgreSQL B-tree entry holds at most about 2.7 kB): the keys of paid
// quotas name a tenant or a customer and are short.
const MaxKeyLen = 1024

// MaxIDLen is the longest Entry.ID, in bytes: floodgate.MaxLeaseLen, the
// longest reservation ID.
const MaxIDLen = floodgate.MaxLeaseLen

// DefaultPageSize is the number of rows Store.Report returns when
// Query.Limit is 0; MaxPageSize is the most it returns.
const (
	DefaultPageSize = 1000
	MaxPageSize     = 10_000
)

// ErrClosed is wrapped by the errors of a Store used after Close.
var ErrClosed = errors.New("ledger: closed")

// Entry is one committed use of a durable quota: Units taken from Key's
// budget of Limit in the window that starts at Window, committed at At
// under the ID of its reservation (or idempotency key). A Store keeps one
// Entry per (Key, ID), for ever: a second Entry with the same Key and ID is
// the same commit again, and is not written.
//
// A durable quota is a fixed window (floodgate.FixedWindow, Aligned or
// FirstHit): only a window has a well-defined "units used in this period"
// that a lost counter can be rebuilt from, and that a customer can be
// billed for. The sliding algorithms and the buckets forget units
// gradually, so no sum of commits says what their state should be.
type Entry struct {
	// Key is the store key, as the Limiter sends it to the store (with
	// its KeyPrefix): 1 to MaxKeyLen bytes, any bytes.
	Key string
	// Limit is the quota the units were taken under: a valid limit whose
	// algorithm is FixedWindow (or empty, the default). A Store keeps its
	// Limit, Period and Window (the alignment); Name, CountRejected and
	// LocalBudget are not recorded.
	Limit floodgate.Limit
	// Window is the start of the window the units count in: a multiple of
	// Limit.Period since the Unix epoch for an Aligned window (WindowAt
	// computes it), the key's first hit for a FirstHit one (WindowOf reads
	// it from a Decision). Whole microseconds.
	Window time.Time
	// Units is the cost committed, 0 to floodgate.MaxLimit: the actual
	// cost of a reservation's commit (0 for a request that used nothing).
	Units int64
	// ID is the reservation's ID or the request's idempotency key: 1 to
	// MaxIDLen bytes of [A-Za-z0-9_-], unique per Key.
	ID string
	// At is when the units were committed, by the committer's clock, kept
	// to the microsecond (truncated); it must be set.
	At time.Time
}

// Validate reports the first problem of the entry: an error wrapping
// floodgate.ErrInvalidRequest (or floodgate.ErrInvalidLimit for the
// limit) in which errors.As finds a *floodgate.FieldError naming the field
// ("key", "limit", "window", "units", "id", "at").
func (e *Entry) Validate() error {
	if err := checkKey("key", e.Key); err != nil {
		return err
	}
	if err := checkLimit(e.Limit); err != nil {
		return err
	}
	if err := checkTime("window", e.Window); err != nil {
		return err
	}
	if e.Window.Truncate(time.Microsecond) != e.Window {
		return invalid("window", "%v is not a whole number of microseconds", e.Window)
	}
	if e.Limit.IsCalendar() {
		if w := WindowFor(e.Limit, e.Window); !w.Start.Equal(e.Window) {
			return invalid("window", "%v is not the start of a window of the calendar %q (that is %v)", e.Window.UTC(), e.Limit.Calendar.String(), w.Start.UTC())
		}
	} else if aligned(e.Limit) {
		if w := WindowAt(e.Limit.Period, e.Window); !w.Start.Equal(e.Window) {
			return invalid("window", "%v is not the start of an aligned window of %v (that is %v)", e.Window.UTC(), e.Limit.Period, w.Start.UTC())
		}
	}
	switch {
	case e.Units < 0:
		return invalid("units", "%d is negative", e.Units)
	case e.Units > floodgate.MaxLimit:
		return invalid("units", "%d is above the maximum %d", e.Units, floodgate.MaxLimit)
	}
	if err := checkID(e.ID); err != nil {
		return err
	}
	return checkTime("at", e.At)
}

// Check validates a batch for Store.Record: every entry, and no two with
// the same Key and ID (one commit is one entry). The error of an entry is
// a *floodgate.ItemError with its index. Stores call it.
func Check(entries []Entry) error {
	type keyID struct{ key, id string }
	var seen map[keyID]int
	if len(entries) > 1 {
		seen = make(map[keyID]int, len(entries))
	}
	for i := range entries {
		if err := entries[i].Validate(); err != nil {
			return &floodgate.ItemError{Index: i, Err: err}
		}
		if seen == nil {
			continue
		}
		k := keyID{entries[i].Key, entries[i].ID}
		if j, ok := seen[k]; ok {
			return &floodgate.ItemError{Index: i, Err: invalid("id", "entry %d has the same key and id: one commit is one entry", j)}
		}
		seen[k] = i
	}
	return nil
}

// CheckUsage validates the arguments of Store.Usage. Stores call it.
func CheckUsage(key string, period time.Duration, at time.Time) error {
	if err := checkKey("key", key); err != nil {
		return err
	}
	if err := checkPeriod("period", period); err != nil {
		return err
	}
	return checkTime("at", at)
}

// Window is a window of a durable quota: Period long from Start.
type Window struct {
	Start  time.Time
	Period time.Duration
}

// WindowAt is the aligned window of period that contains t: it starts at
// the multiple of period since the Unix epoch at or before t, as the
// algorithm package's FixedWindow starts an Aligned window.
func WindowAt(period time.Duration, t time.Time) Window {
	us, p := t.UnixMicro(), period.Microseconds()
	if p <= 0 {
		return Window{Start: time.UnixMicro(us).UTC(), Period: period}
	}
	start := us - us%p
	if us < 0 && us%p != 0 {
		start -= p
	}
	return Window{Start: time.UnixMicro(start).UTC(), Period: period}
}

// WindowFor is the window of limit that contains t: for a calendar limit
// (floodgate.Limit.Calendar) its calendar period, whose Period is that
// window's length (743 hours for March 2026 in New York); else
// WindowAt(limit.Period, t), which for a FirstHit limit is the aligned
// window, not the key's.
func WindowFor(limit floodgate.Limit, t time.Time) Window {
	if limit.IsCalendar() {
		start, end := limit.Calendar.Window(t)
		return Window{Start: start.UTC(), Period: end.Sub(start)}
	}
	return WindowAt(limit.Period, t)
}

// Period is the length of the entry's window, which a Store records with
// it: Limit.Period, or for a calendar limit the length of the calendar
// period that starts at Window.
func (e *Entry) Period() time.Duration {
	if e.Limit.IsCalendar() {
		return WindowFor(e.Limit, e.Window).Period
	}
	return e.Limit.Period
}

// Alignment is how a Store records the windows of a quota as text:
// "aligned", "first_hit", or for a calendar "calendar " and the calendar
// (floodgate.Calendar.String: "calendar month America/New_York 15").
// LimitOf reads it back.
func Alignment(l floodgate.Limit) string {
	switch {
	case l.IsCalendar():
		return "calendar " + l.Calendar.String()
	case l.Window == floodgate.FirstHit:
		return string(floodgate.FirstHit)
	}
	return string(floodgate.Aligned)
}

// LimitOf is the quota a Store recorded: a FixedWindow of quota units
// whose windows last period, aligned as alignment (Alignment) says; a
// calendar quota has Period 0 and its Calendar. Stores call it when they
// read a Usage back.
func LimitOf(quota int64, period time.Duration, alignment string) (floodgate.Limit, error) {
	l := floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: quota}
	if rest, ok := strings.CutPrefix(alignment, "calendar "); ok {
		f := strings.Fields(rest)
		if len(f) < 2 || len(f) > 3 {
			return l, fmt.Errorf("%w: alignment %q", floodgate.ErrUnexpectedReply, alignment)
		}
		anchor := ""
		if len(f) == 3 {
			anchor = f[2]
		}
		c, err := floodgate.ParseCalendar(f[0], f[1], anchor)
		if err != nil {
			return l, fmt.Errorf("%w: alignment %q: %w", floodgate.ErrUnexpectedReply, alignment, err)
		}
		l.Calendar = c
		return l, nil
	}
	l.Period, l.Window = period, floodgate.Window(alignment)
	return l, nil
}

// WindowOf is the window a store's fixed-window Decision d counts in
// under limit: the aligned window that contains d.Now, or for a FirstHit
// limit the window that ends d.ResetAfter after d.Now. ok is false when
// the counter is empty (ResetAfter 0: no window has started) or d.Now is
// not set. It is how a committer finds Entry.Window from the decision of
// its commit, and how Reconcile's PeekUsed checks that a counter still
// counts the ledger's window.
func WindowOf(limit floodgate.Limit, d floodgate.Decision) (w Window, ok bool) {
	if d.Now.IsZero() || d.ResetAfter <= 0 {
		return Window{}, false
	}
	if limit.IsCalendar() || aligned(limit) {
		return WindowFor(limit, d.Now), true
	}
	end := d.Now.Truncate(time.Microsecond).Add(d.ResetAfter)
	return Window{Start: end.Add(-limit.Period).UTC(), Period: limit.Period}, true
}

// End is when the window ends: Start + Period.
func (w Window) End() time.Time { return w.Start.Add(w.Period) }

// Contains reports whether t is in the window: Start <= t < End.
func (w Window) Contains(t time.Time) bool { return !t.Before(w.Start) && t.Before(w.End()) }

// IsZero reports whether w is the zero Window.
func (w Window) IsZero() bool { return w.Start.IsZero() && w.Period == 0 }

// String formats the window as "[start, end)" in UTC, RFC 3339.
func (w Window) String() string {
	return "[" + w.Start.UTC().Format(time.RFC3339Nano) + ", " + w.End().UTC().Format(time.RFC3339Nano) + ")"
}

// Usage is what a ledger holds for one key and window: the sum of its
// entries. Store.Usage returns one, Store.Report pages of them.
type Usage struct {
	// Key is the store key.
	Key string
	// Limit is the quota of the window's latest entry (by At): its
	// Algorithm, Limit, Period and Window, as recorded.
	Limit floodgate.Limit
	// Window is the window.
	Window Window
	// Units is the sum of the entries' units: what the customer used in
	// the window, and what a lost counter is rebuilt to.
	Units int64
	// Entries is the number of entries (commits).
	Entries int64
	// First and Last are the earliest and latest At of the entries.
	First, Last time.Time
}

// Query selects the rows of a report: the windows of keys starting with
// KeyPrefix whose Start is in [From, To), and that contain Active when it
// is set; one page of them after After. The zero Query is every window,
// first page.
type Query struct {
	// From and To bound the windows' starts: From <= Start < To. A zero
	// From is the beginning, a zero To no end. A window belongs wholly to
	// the range it starts in, whatever its entries' At: bill a month by
	// the windows that start in it.
	From, To time.Time
	// KeyPrefix keeps the keys that start with it (bytewise); empty keeps
	// every key.
	KeyPrefix string
	// Active, when set, keeps the windows that contain it (Start <= Active
	// < End): the windows whose counters a store still holds at that
	// time. Reconcile sets it to now.
	Active time.Time
	// After is the last row of the previous page: the page starts after
	// its Key and Window. Nil starts at the first row.
	After *Usage
	// Limit is the page size: 0 means DefaultPageSize, at most MaxPageSize.
	Limit int
}

// Validate reports the first problem of q, an error wrapping
// floodgate.ErrInvalidRequest with a *floodgate.FieldError. Stores call
// it.
func (q *Query) Validate() error {
	if !q.From.IsZero() {
		if err := checkTime("from", q.From); err != nil {
			return err
		}
	}
	if !q.To.IsZero() {
		if err := checkTime("to", q.To); err != nil {
			return err
		}
		if q.To.Before(q.From) {
			return invalid("to", "%v is before from %v", q.To.UTC(), q.From.UTC())
		}
	}
	if !q.Active.IsZero() {
		if err := checkTime("active", q.Active); err != nil {
			return err
		}
	}
	if len(q.KeyPrefix) > MaxKeyLen {
		return invalid("key_prefix", "%d bytes is above the maximum %d", len(q.KeyPrefix), MaxKeyLen)
	}
	if q.After != nil {
		if err := checkKey("after.key", q.After.Key); err != nil {
			return err
		}
		if err := checkPeriod("after.window", q.After.Window.Period); err != nil {
			return err
		}
		if err := checkTime("after.window", q.After.Window.Start); err != nil {
			return err
		}
	}
	if q.Limit < 0 || q.Limit > MaxPageSize {
		return invalid("limit", "%d is not between 0 and %d", q.Limit, MaxPageSize)
	}
	return nil
}

// PageSize is q.Limit, or DefaultPageSize when it is 0.
func (q *Query) PageSize() int {
	if q.Limit == 0 {
		return DefaultPageSize
	}
	return q.Limit
}

// PrefixEnd returns the smallest string greater than every string that
// starts with prefix (bytewise), for a range scan key >= prefix AND key <
// end; ok is false when there is none (prefix is empty or all 0xff
// bytes). Stores use it.
func PrefixEnd(prefix string) (end string, ok bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0xff {
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// aligned reports whether l's windows are aligned to the epoch.
func aligned(l floodgate.Limit) bool { return l.Window != floodgate.FirstHit }

func checkKey(field, key string) error {
	switch {
	case key == "":
		return invalid(field, "empty")
	case len(key) > MaxKeyLen:
		return invalid(field, "%d bytes is above the ledger's maximum %d", len(key), MaxKeyLen)
	}
	return nil
}

func checkLimit(l floodgate.Limit) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if alg := l.EffectiveAlgorithm(); alg != floodgate.FixedWindow {
		return &floodgate.FieldError{Kind: floodgate.ErrInvalidLimit, Field: "algorithm",
			Problem: fmt.Sprintf("%s is not a durable quota: only fixed_window has a count per window to record and rebuild", alg)}
	}
	return nil
}

func checkPeriod(field string, p time.Duration) error {
	switch {
	case p <= 0:
		return invalid(field, "%v must be above zero", p)
	case p > floodgate.MaxPeriod:
		return invalid(field, "%v is above the maximum %v", p, floodgate.MaxPeriod)
	case p%time.Microsecond != 0:
		return invalid(field, "%v is not a whole number of microseconds", p)
	}
	return nil
}

// maxTime is the latest time a ledger keeps: a window that starts then
// still ends before 2^53 µs, as the algorithm package's times do.
var maxTime = time.UnixMicro(1<<53 - 1 - int64(floodgate.MaxPeriod/time.Microsecond)).UTC()

func checkTime(field string, t time.Time) error {
	switch {
	case t.IsZero():
		return invalid(field, "not set")
	case t.Before(time.Unix(0, 0)) || t.After(maxTime):
		return invalid(field, "%v is outside %v to %v", t.UTC(), time.Unix(0, 0).UTC(), maxTime)
	}
	return nil
}

func checkID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return invalid("id", "%d bytes, want 1 to %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return invalid("id", "byte %q at %d is not one of [A-Za-z0-9_-]", c, i)
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return &floodgate.FieldError{Kind: floodgate.ErrInvalidRequest, Field: field, Problem: fmt.Sprintf(format, args...)}
}
