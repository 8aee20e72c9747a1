// Package ledgertest tests ledger.Store implementations: Run is the
// conformance suite every ledger passes, as floodgatetest.Run is every
// counter store's.
//
// A ledger author calls Run from a test in the ledger's package, with a
// function that makes a new, empty place for a ledger (a file, a database)
// and returns how to open it:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) ledgertest.Opener {
//			path := filepath.Join(t.TempDir(), "ledger.db")
//			return func(ctx context.Context) (ledger.Store, error) {
//				return mystore.Open(ctx, path, nil)
//			}
//		})
//	}
//
// Every case calls it for a place of its own, opens it (twice for the
// reopening case) and closes what it opened. Times are fixed instants,
// never the machine's clock, so the expected answers are exact.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
)

// Opener opens the ledger of one place. The first call creates it; a
// call after the ledger it returned was closed opens the same data again.
type Opener func(ctx context.Context) (ledger.Store, error)

// Run tests a ledger.Store against the contract written in the ledger
// package doc. newLedger returns the Opener of a new, empty place. The
// cases, each a parallel subtest:
//
//   - record: entries are written once and summed per key and window;
//   - exactly_once: ten concurrent Records of one entry write it once; a
//     retried batch writes nothing again; a retry with other units
//     leaves the first;
//   - usage: the window of each period that contains a time, Aligned and
//     FirstHit, for keys that differ in any byte;
//   - report: order (key bytewise, window start, period), pages of every
//     size, From and To, KeyPrefix, Active, the latest entry's limit;
//   - invalid: bad entries, batches, arguments and queries are errors
//     wrapping floodgate.ErrInvalidRequest (or ErrInvalidLimit) with a
//     *floodgate.FieldError, and an invalid batch writes nothing;
//   - context: a cancelled context is an error wrapping context.Canceled
//     and writes nothing;
//   - reopen: what was recorded is there after Close and reopening, and
//     a closed ledger's calls are errors wrapping ledger.ErrClosed;
//   - batch: a batch of 2000 entries in one Record.
func Run(t *testing.T, newLedger func(t *testing.T) Opener) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, open Opener)
	}{
		{"record", testRecord},
		{"exactly_once", testExactlyOnce},
		{"usage", testUsage},
		{"report", testReport},
		{"invalid", testInvalid},
		{"context", testContext},
		{"reopen", testReopen},
		{"batch", testBatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newLedger(t))
		})
	}
}

// base is the suite's first instant: a Monday, 00:00 UTC, a multiple of
// every period the suite uses.
var base = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

const (
	hour = time.Hour
	day  = 24 * time.Hour
)

// quota is an aligned fixed window of n per period.
func quota(n int64, period time.Duration) floodgate.Limit {
	return floodgate.Limit{Limit: n, Period: period}
}

// firstHit is a FirstHit fixed window of n per period.
func firstHit(n int64, period time.Duration) floodgate.Limit {
	return floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: n, Period: period, Window: floodgate.FirstHit}
}

// entry is a commit of units on key, ID id, at, in the aligned window of
// limit that contains at (or, for FirstHit, the window that starts at
// start, when given).
func entry(key, id string, limit floodgate.Limit, at time.Time, units int64) ledger.Entry {
	return ledger.Entry{Key: key, Limit: limit, Window: ledger.WindowAt(limit.Period, at).Start, Units: units, ID: id, At: at}
}

func open(t *testing.T, o Opener) ledger.Store {
	t.Helper()
	s, err := o(t.Context())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func record(t *testing.T, s ledger.Store, es ...ledger.Entry) []bool {
	t.Helper()
	written, err := s.Record(t.Context(), es)
	if err != nil {
		t.Fatalf("Record(%d entries): %v", len(es), err)
	}
	if len(written) != len(es) {
		t.Fatalf("Record(%d entries) returned %d results", len(es), len(written))
	}
	return written
}

func usage(t *testing.T, s ledger.Store, key string, period time.Duration, at time.Time) ledger.Usage {
	t.Helper()
	u, err := s.Usage(t.Context(), key, period, at)
	if err != nil {
		t.Fatalf("Usage(%q, %v, %v): %v", key, period, at.Sub(base), err)
	}
	return u
}

// checkUsage compares the fields of a Usage that the suite knows.
func checkUsage(t *testing.T, what string, got, want ledger.Usage) {
	t.Helper()
	var diffs []string
	if got.Key != want.Key {
		diffs = append(diffs, fmt.Sprintf("Key %q, want %q", got.Key, want.Key))
	}
	if !got.Window.Start.Equal(want.Window.Start) || got.Window.Period != want.Window.Period {
		diffs = append(diffs, fmt.Sprintf("Window %v, want %v", got.Window, want.Window))
	}
	if got.Units != want.Units {
		diffs = append(diffs, fmt.Sprintf("Units %d, want %d", got.Units, want.Units))
	}
	if got.Entries != want.Entries {
		diffs = append(diffs, fmt.Sprintf("Entries %d, want %d", got.Entries, want.Entries))
	}
	if !want.First.IsZero() && !got.First.Equal(want.First) {
		diffs = append(diffs, fmt.Sprintf("First %v, want %v", got.First, want.First))
	}
	if !want.Last.IsZero() && !got.Last.Equal(want.Last) {
		diffs = append(diffs, fmt.Sprintf("Last %v, want %v", got.Last, want.Last))
	}
	if want.Limit.Limit != 0 && (got.Limit.Limit != want.Limit.Limit || got.Limit.Period != want.Limit.Period ||
		got.Limit.EffectiveAlgorithm() != want.Limit.EffectiveAlgorithm() || window(got.Limit) != window(want.Limit)) {
		diffs = append(diffs, fmt.Sprintf("Limit %v, want %v", got.Limit, want.Limit))
	}
	if len(diffs) > 0 {
		t.Errorf("%s: %s", what, strings.Join(diffs, "; "))
	}
}

func window(l floodgate.Limit) floodgate.Window {
	if l.Window == "" {
		return floodgate.Aligned
	}
	return l.Window
}

func testRecord(t *testing.T, o Opener) {
	s := open(t, o)
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	q := quota(1000, day)
	at := base.Add(3*hour + 1234567*time.Microsecond)
	w := ledger.WindowAt(day, at)
	if got := usage(t, s, "acme", day, at); got.Units != 0 || got.Entries != 0 || !got.Window.IsZero() {
		t.Errorf("Usage of an empty ledger = %+v, want zero units, entries and window", got)
	}
	written := record(t, s,
		entry("acme", "r1", q, at, 10),
		entry("acme", "r2", q, at.Add(hour), 0),
		entry("acme", "r3", q, at.Add(2*hour), 32),
		entry("globex", "r1", q, at, 5), // the same ID on another key is another commit
	)
	if !slices.Equal(written, []bool{true, true, true, true}) {
		t.Errorf("Record = %v, want all written", written)
	}
	checkUsage(t, "acme", usage(t, s, "acme", day, at.Add(20*hour)), ledger.Usage{Key: "acme", Window: w, Units: 42, Entries: 3,
		First: at, Last: at.Add(2 * hour), Limit: q})
	checkUsage(t, "globex", usage(t, s, "globex", day, base), ledger.Usage{Key: "globex", Window: w, Units: 5, Entries: 1, First: at, Last: at})
	// At is kept to the microsecond, truncated.
	record(t, s, entry("initech", "r1", q, at.Add(999*time.Nanosecond), 1))
	checkUsage(t, "initech", usage(t, s, "initech", day, at), ledger.Usage{Key: "initech", Window: w, Units: 1, Entries: 1, First: at, Last: at})
	// The next window starts from nothing.
	checkUsage(t, "acme next day", usage(t, s, "acme", day, w.End()), ledger.Usage{Key: "acme"})
	// An empty batch writes nothing, and is no error.
	if written, err := s.Record(t.Context(), nil); err != nil || len(written) != 0 {
		t.Errorf("Record(nil) = %v, %v; want [], nil", written, err)
	}
}

func testExactlyOnce(t *testing.T, o Opener) {
	s := open(t, o)
	q := quota(100, hour)
	at := base.Add(90 * time.Minute)
	e := entry("tenant:acme", "commit-1", q, at, 7)

	const clients = 10
	results := make([]bool, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		wg.Go(func() {
			<-start
			var written []bool
			written, errs[i] = s.Record(t.Context(), []ledger.Entry{e})
			if len(written) == 1 {
				results[i] = written[0]
			}
		})
	}
	close(start)
	wg.Wait()
	n := 0
	for i := range clients {
		if errs[i] != nil {
			t.Errorf("client %d: Record: %v", i, errs[i])
		}
		if results[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of %d concurrent Records of one entry wrote it, want 1", n, clients)
	}
	checkUsage(t, "after ten Records", usage(t, s, e.Key, hour, at), ledger.Usage{Key: e.Key, Window: ledger.WindowAt(hour, at), Units: 7, Entries: 1})

	// A batch retried after an unknown outcome (a timeout) writes nothing
	// again; a batch with old and new entries writes the new ones.
	batch := []ledger.Entry{
		entry("tenant:acme", "commit-2", q, at.Add(time.Minute), 3),
		entry("tenant:globex", "commit-2", q, at.Add(time.Minute), 4),
	}
	if got := record(t, s, batch...); !slices.Equal(got, []bool{true, true}) {
		t.Errorf("first Record of the batch = %v, want [true true]", got)
	}
	for range 3 {
		if got := record(t, s, batch...); !slices.Equal(got, []bool{false, false}) {
			t.Errorf("retried batch = %v, want [false false]", got)
		}
	}
	mixed := append([]ledger.Entry{entry("tenant:acme", "commit-3", q, at.Add(2*time.Minute), 1)}, batch...)
	if got := record(t, s, mixed...); !slices.Equal(got, []bool{true, false, false}) {
		t.Errorf("batch of one new and two old entries = %v, want [true false false]", got)
	}
	// A retry with other units is the same commit: the first one stays.
	other := e
	other.Units, other.At = 70, at.Add(time.Minute)
	if got := record(t, s, other); !slices.Equal(got, []bool{false}) {
		t.Errorf("Record of a known (key, id) with other units = %v, want [false]", got)
	}
	checkUsage(t, "acme", usage(t, s, "tenant:acme", hour, at), ledger.Usage{Key: "tenant:acme", Window: ledger.WindowAt(hour, at), Units: 7 + 3 + 1, Entries: 3})
	checkUsage(t, "globex", usage(t, s, "tenant:globex", hour, at), ledger.Usage{Key: "tenant:globex", Window: ledger.WindowAt(hour, at), Units: 4, Entries: 1})

	// Ten clients racing with batches that overlap: each entry once.
	var wg2 sync.WaitGroup
	counts := make([]int, 20)
	var mu sync.Mutex
	for c := range clients {
		wg2.Go(func() {
			var es []ledger.Entry
			for i := range 20 {
				if (i+c)%2 == 0 {
					es = append(es, entry("race", fmt.Sprintf("id%d", i), q, at, 1))
				}
			}
			written, err := s.Record(t.Context(), es)
			if err != nil {
				t.Errorf("client %d: %v", c, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for j, w := range written {
				if w {
					var i int
					fmt.Sscanf(es[j].ID, "id%d", &i)
					counts[i]++
				}
			}
		})
	}
	wg2.Wait()
	for i, c := range counts {
		if c != 1 {
			t.Errorf("entry id%d written %d times by overlapping batches, want 1", i, c)
		}
	}
	if got := usage(t, s, "race", hour, at); got.Units != 20 || got.Entries != 20 {
		t.Errorf("race: %d units in %d entries, want 20 in 20", got.Units, got.Entries)
	}
}

func testUsage(t *testing.T, o Opener) {
	s := open(t, o)
	// Aligned windows of two periods on one key.
	record(t, s,
		entry("k", "a1", quota(10, hour), base.Add(10*time.Minute), 1),
		entry("k", "a2", quota(10, hour), base.Add(59*time.Minute+59*time.Second), 2),
		entry("k", "a3", quota(10, hour), base.Add(hour), 4),
		entry("k", "d1", quota(100, day), base.Add(5*hour), 8),
	)
	for _, c := range []struct {
		name   string
		period time.Duration
		at     time.Time
		want   ledger.Usage
	}{
		{"first hour", hour, base, ledger.Usage{Key: "k", Window: ledger.Window{Start: base, Period: hour}, Units: 3, Entries: 2}},
		{"first hour, last µs", hour, base.Add(hour - time.Microsecond), ledger.Usage{Key: "k", Window: ledger.Window{Start: base, Period: hour}, Units: 3, Entries: 2}},
		{"second hour", hour, base.Add(hour), ledger.Usage{Key: "k", Window: ledger.Window{Start: base.Add(hour), Period: hour}, Units: 4, Entries: 1}},
		{"third hour", hour, base.Add(2 * hour), ledger.Usage{Key: "k"}},
		{"before", hour, base.Add(-time.Microsecond), ledger.Usage{Key: "k"}},
		{"day", day, base.Add(23 * hour), ledger.Usage{Key: "k", Window: ledger.Window{Start: base, Period: day}, Units: 8, Entries: 1}},
		{"another period", 2 * hour, base, ledger.Usage{Key: "k"}},
	} {
		checkUsage(t, c.name, usage(t, s, "k", c.period, c.at), c.want)
	}

	// FirstHit windows start at a key's first commit: Usage finds the one
	// that contains the time, and no later one.
	fh := firstHit(50, hour)
	w1 := base.Add(17*time.Minute + 3*time.Microsecond)
	w2 := w1.Add(hour + 5*time.Minute)
	record(t, s,
		ledger.Entry{Key: "fh", Limit: fh, Window: w1, Units: 5, ID: "x1", At: w1},
		ledger.Entry{Key: "fh", Limit: fh, Window: w1, Units: 6, ID: "x2", At: w1.Add(30 * time.Minute)},
		ledger.Entry{Key: "fh", Limit: fh, Window: w2, Units: 7, ID: "x3", At: w2},
	)
	for _, c := range []struct {
		name string
		at   time.Time
		want ledger.Usage
	}{
		{"before the first", w1.Add(-time.Microsecond), ledger.Usage{Key: "fh"}},
		{"first window", w1.Add(hour - time.Microsecond), ledger.Usage{Key: "fh", Window: ledger.Window{Start: w1, Period: hour}, Units: 11, Entries: 2}},
		{"between", w1.Add(hour), ledger.Usage{Key: "fh"}},
		{"second window", w2.Add(time.Minute), ledger.Usage{Key: "fh", Window: ledger.Window{Start: w2, Period: hour}, Units: 7, Entries: 1}},
	} {
		checkUsage(t, "first_hit: "+c.name, usage(t, s, "fh", hour, c.at), c.want)
	}

	// Keys that differ in any byte never share a window.
	keys := []string{"a", "a\x00", "a\xff", "A", "a:b", "a{b}", "a%", "a_", "\xff\xfe", "é", strings.Repeat("x", ledger.MaxKeyLen)}
	var es []ledger.Entry
	for i, k := range keys {
		es = append(es, entry(k, "id", quota(1000, hour), base, int64(i+1)))
	}
	record(t, s, es...)
	for i, k := range keys {
		if got := usage(t, s, k, hour, base); got.Units != int64(i+1) || got.Key != k {
			t.Errorf("key %q: Usage = %d units of key %q, want %d", k, got.Units, got.Key, i+1)
		}
	}
}

func testReport(t *testing.T, o Opener) {
	s := open(t, o)
	// Keys, windows and periods recorded out of order.
	type row struct {
		key    string
		start  time.Time
		period time.Duration
		units  int64
	}
	want := []row{
		{"a", base, hour, 1},
		{"a", base, day, 2},
		{"a", base.Add(hour), hour, 3},
		{"a", base.Add(day), day, 4},
		{"a\x00", base, hour, 5},
		{"ab", base.Add(2 * hour), hour, 6},
		{"b", base, hour, 7},
		{"b\xff", base, hour, 8},
		{"b\xff\xff", base.Add(3 * day), day, 9},
		{"c", base.Add(5 * day), day, 10},
	}
	var es []ledger.Entry
	for i := len(want) - 1; i >= 0; i-- {
		r := want[i]
		es = append(es, ledger.Entry{Key: r.key, Limit: quota(100, r.period), Window: r.start, Units: r.units, ID: fmt.Sprintf("e%d", i), At: r.start.Add(time.Minute)})
	}
	// A second entry in one window, under a raised limit: the window's
	// Limit is the latest entry's.
	es = append(es, ledger.Entry{Key: "a", Limit: quota(500, hour), Window: base, Units: 100, ID: "raise", At: base.Add(30 * time.Minute)})
	want[0].units += 100
	record(t, s, es...)

	rows := func(q ledger.Query) []row {
		t.Helper()
		var got []row
		for u, err := range ledger.All(t.Context(), s, q) {
			if err != nil {
				t.Fatalf("All(%+v): %v", q, err)
			}
			got = append(got, row{u.Key, u.Window.Start.UTC(), u.Window.Period, u.Units})
		}
		return got
	}
	same := func(what string, got, want []row) {
		t.Helper()
		if !slices.EqualFunc(got, want, func(a, b row) bool {
			return a.key == b.key && a.start.Equal(b.start) && a.period == b.period && a.units == b.units
		}) {
			t.Errorf("%s:\n got %v\nwant %v", what, got, want)
		}
	}
	for _, size := range []int{0, 1, 2, 3, len(want) - 1, len(want), len(want) + 1} {
		same(fmt.Sprintf("every row, pages of %d", size), rows(ledger.Query{Limit: size}), want)
	}
	page, err := s.Report(t.Context(), ledger.Query{Limit: 3})
	if err != nil || len(page) != 3 {
		t.Fatalf("Report(Limit 3) = %d rows, %v; want 3", len(page), err)
	}
	checkUsage(t, "first row", page[0], ledger.Usage{Key: "a", Window: ledger.Window{Start: base, Period: hour}, Units: 101, Entries: 2,
		First: base.Add(time.Minute), Last: base.Add(30 * time.Minute), Limit: quota(500, hour)})
	next, err := s.Report(t.Context(), ledger.Query{Limit: 3, After: &page[2]})
	if err != nil || len(next) != 3 || next[0].Key != "a" || !next[0].Window.Start.Equal(base.Add(day)) || next[1].Key != "a\x00" {
		t.Errorf("Report after the third row = %v, %v; want 3 rows from (\"a\", base+1d)", next, err)
	}

	filter := func(keep func(row) bool) []row {
		var out []row
		for _, r := range want {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
	same("From base+1h", rows(ledger.Query{From: base.Add(hour), Limit: 2}), filter(func(r row) bool { return !r.start.Before(base.Add(hour)) }))
	same("To base+1h", rows(ledger.Query{To: base.Add(hour), Limit: 2}), filter(func(r row) bool { return r.start.Before(base.Add(hour)) }))
	same("From base+1h To base+3d", rows(ledger.Query{From: base.Add(hour), To: base.Add(3 * day)}),
		filter(func(r row) bool { return !r.start.Before(base.Add(hour)) && r.start.Before(base.Add(3*day)) }))
	same("From = To", rows(ledger.Query{From: base, To: base}), nil)
	for _, prefix := range []string{"a", "b\xff", "\xff", "ab", "c", "d", ""} {
		same(fmt.Sprintf("KeyPrefix %q", prefix), rows(ledger.Query{KeyPrefix: prefix, Limit: 2}),
			filter(func(r row) bool { return strings.HasPrefix(r.key, prefix) }))
	}
	active := base.Add(90 * time.Minute)
	same("Active base+90m", rows(ledger.Query{Active: active}),
		filter(func(r row) bool { return !active.Before(r.start) && active.Before(r.start.Add(r.period)) }))
	same("Active, KeyPrefix b, From base", rows(ledger.Query{Active: base, KeyPrefix: "b", From: base, Limit: 1}),
		filter(func(r row) bool { return r.start.Equal(base) && strings.HasPrefix(r.key, "b") }))
}

// wantInvalid checks that err wraps kind and holds a FieldError of field.
func wantInvalid(t *testing.T, what string, err error, kind error, field string) {
	t.Helper()
	var fe *floodgate.FieldError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want one about %s", what, field)
	case !errors.Is(err, kind):
		t.Errorf("%s: %v, want an error wrapping %v", what, err, kind)
	case !errors.As(err, &fe):
		t.Errorf("%s: %v holds no *floodgate.FieldError", what, err)
	case fe.Field != field:
		t.Errorf("%s: field %q, want %q (%v)", what, fe.Field, field, err)
	}
}

func testInvalid(t *testing.T, o Opener) {
	s := open(t, o)
	good := entry("k", "id", quota(10, hour), base, 1)
	bad := func(f func(e *ledger.Entry)) ledger.Entry {
		e := good
		f(&e)
		return e
	}
	for _, c := range []struct {
		name  string
		e     ledger.Entry
		kind  error
		field string
	}{
		{"empty key", bad(func(e *ledger.Entry) { e.Key = "" }), floodgate.ErrInvalidRequest, "key"},
		{"long key", bad(func(e *ledger.Entry) { e.Key = strings.Repeat("k", ledger.MaxKeyLen+1) }), floodgate.ErrInvalidRequest, "key"},
		{"negative units", bad(func(e *ledger.Entry) { e.Units = -1 }), floodgate.ErrInvalidRequest, "units"},
		{"units above MaxLimit", bad(func(e *ledger.Entry) { e.Units = floodgate.MaxLimit + 1 }), floodgate.ErrInvalidRequest, "units"},
		{"empty id", bad(func(e *ledger.Entry) { e.ID = "" }), floodgate.ErrInvalidRequest, "id"},
		{"id with a space", bad(func(e *ledger.Entry) { e.ID = "a b" }), floodgate.ErrInvalidRequest, "id"},
		{"long id", bad(func(e *ledger.Entry) { e.ID = strings.Repeat("i", ledger.MaxIDLen+1) }), floodgate.ErrInvalidRequest, "id"},
		{"no at", bad(func(e *ledger.Entry) { e.At = time.Time{} }), floodgate.ErrInvalidRequest, "at"},
		{"at before 1970", bad(func(e *ledger.Entry) { e.At = time.Unix(-1, 0) }), floodgate.ErrInvalidRequest, "at"},
		{"no window", bad(func(e *ledger.Entry) { e.Window = time.Time{} }), floodgate.ErrInvalidRequest, "window"},
		{"unaligned window", bad(func(e *ledger.Entry) { e.Window = base.Add(time.Minute) }), floodgate.ErrInvalidRequest, "window"},
		{"window in ns", bad(func(e *ledger.Entry) { e.Limit.Window = floodgate.FirstHit; e.Window = base.Add(1) }), floodgate.ErrInvalidRequest, "window"},
		{"gcra", bad(func(e *ledger.Entry) { e.Limit.Algorithm = floodgate.GCRA }), floodgate.ErrInvalidLimit, "algorithm"},
		{"sliding window", bad(func(e *ledger.Entry) { e.Limit.Algorithm = floodgate.SlidingWindow }), floodgate.ErrInvalidLimit, "algorithm"},
		{"no period", bad(func(e *ledger.Entry) { e.Limit.Period = 0 }), floodgate.ErrInvalidLimit, "period"},
		{"negative limit", bad(func(e *ledger.Entry) { e.Limit.Limit = -1 }), floodgate.ErrInvalidLimit, "limit"},
	} {
		written, err := s.Record(t.Context(), []ledger.Entry{good, c.e})
		wantInvalid(t, c.name, err, c.kind, c.field)
		var ie *floodgate.ItemError
		if err != nil && (!errors.As(err, &ie) || ie.Index != 1) {
			t.Errorf("%s: %v, want a *floodgate.ItemError of index 1", c.name, err)
		}
		if written != nil {
			t.Errorf("%s: Record returned %v with its error, want nil", c.name, written)
		}
	}
	wantInvalid(t, "same key and id twice in a batch", func() error { _, err := s.Record(t.Context(), []ledger.Entry{good, good}); return err }(),
		floodgate.ErrInvalidRequest, "id")
	if got := usage(t, s, "k", hour, base); got.Units != 0 {
		t.Errorf("invalid batches wrote %d units, want none", got.Units)
	}

	for _, c := range []struct {
		name   string
		key    string
		period time.Duration
		at     time.Time
		field  string
	}{
		{"empty key", "", hour, base, "key"},
		{"zero period", "k", 0, base, "period"},
		{"period in ns", "k", hour + 1, base, "period"},
		{"period above MaxPeriod", "k", floodgate.MaxPeriod + time.Microsecond, base, "period"},
		{"no time", "k", hour, time.Time{}, "at"},
	} {
		_, err := s.Usage(t.Context(), c.key, c.period, c.at)
		wantInvalid(t, "Usage: "+c.name, err, floodgate.ErrInvalidRequest, c.field)
	}

	for _, c := range []struct {
		name  string
		q     ledger.Query
		field string
	}{
		{"to before from", ledger.Query{From: base, To: base.Add(-time.Microsecond)}, "to"},
		{"negative limit", ledger.Query{Limit: -1}, "limit"},
		{"limit above MaxPageSize", ledger.Query{Limit: ledger.MaxPageSize + 1}, "limit"},
		{"after without key", ledger.Query{After: &ledger.Usage{Window: ledger.Window{Start: base, Period: hour}}}, "after.key"},
		{"after without window", ledger.Query{After: &ledger.Usage{Key: "k"}}, "after.window"},
		{"long prefix", ledger.Query{KeyPrefix: strings.Repeat("p", ledger.MaxKeyLen+1)}, "key_prefix"},
	} {
		_, err := s.Report(t.Context(), c.q)
		wantInvalid(t, "Report: "+c.name, err, floodgate.ErrInvalidRequest, c.field)
	}
}

func testContext(t *testing.T, o Opener) {
	s := open(t, o)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e := entry("k", "id", quota(10, hour), base, 1)
	if _, err := s.Record(ctx, []ledger.Entry{e}); !errors.Is(err, context.Canceled) {
		t.Errorf("Record with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Usage(ctx, "k", hour, base); !errors.Is(err, context.Canceled) {
		t.Errorf("Usage with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Report(ctx, ledger.Query{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Report with a cancelled context: %v, want context.Canceled", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Ping with a cancelled context: %v, want context.Canceled", err)
	}
	if got := usage(t, s, "k", hour, base); got.Units != 0 {
		t.Errorf("a cancelled Record wrote %d units", got.Units)
	}
	// An expired deadline too.
	ctx, cancel = context.WithDeadline(t.Context(), time.Unix(1, 0))
	defer cancel()
	if _, err := s.Record(ctx, []ledger.Entry{e}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Record after its deadline: %v, want context.DeadlineExceeded", err)
	}
	// The ledger still works.
	if got := record(t, s, e); !slices.Equal(got, []bool{true}) {
		t.Errorf("Record after the cancelled ones = %v, want [true]", got)
	}
}

func testReopen(t *testing.T, o Opener) {
	s, err := o(t.Context())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	e := entry("k", "id", firstHit(10, hour), base.Add(time.Minute), 3)
	e.Window = e.At
	if got := record(t, s, e); !slices.Equal(got, []bool{true}) {
		t.Fatalf("Record = %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Record(t.Context(), []ledger.Entry{e}); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Record after Close: %v, want ledger.ErrClosed", err)
	}
	if _, err := s.Usage(t.Context(), "k", hour, base); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Usage after Close: %v, want ledger.ErrClosed", err)
	}
	if _, err := s.Report(t.Context(), ledger.Query{}); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Report after Close: %v, want ledger.ErrClosed", err)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, ledger.ErrClosed) {
		t.Errorf("Ping after Close: %v, want ledger.ErrClosed", err)
	}

	s2 := open(t, o)
	checkUsage(t, "after reopening", usage(t, s2, "k", hour, e.At), ledger.Usage{Key: "k", Window: ledger.Window{Start: e.Window, Period: hour},
		Units: 3, Entries: 1, First: e.At, Last: e.At, Limit: e.Limit})
	if got := record(t, s2, e); !slices.Equal(got, []bool{false}) {
		t.Errorf("Record of the entry again after reopening = %v, want [false]", got)
	}
}

func testBatch(t *testing.T, o Opener) {
	s := open(t, o)
	const n = 2000
	es := make([]ledger.Entry, n)
	for i := range es {
		es[i] = entry(fmt.Sprintf("key%d", i%7), fmt.Sprintf("id%d", i), quota(1_000_000, day), base.Add(time.Duration(i)*time.Second), int64(i))
	}
	written := record(t, s, es...)
	for i, w := range written {
		if !w {
			t.Fatalf("entry %d of a new batch not written", i)
		}
	}
	var total int64
	for u, err := range ledger.All(t.Context(), s, ledger.Query{}) {
		if err != nil {
			t.Fatal(err)
		}
		total += u.Units
	}
	if want := int64(n * (n - 1) / 2); total != want {
		t.Errorf("report total %d units, want %d", total, want)
	}
	es = append(es, entry("key0", "new", quota(1_000_000, day), base, 1))
	written = record(t, s, es...)
	for i, w := range written {
		if w != (i == n) {
			t.Errorf("retried batch: entry %d written %v", i, w)
		}
	}
}
