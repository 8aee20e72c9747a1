package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

var base = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func TestWindowAt(t *testing.T) {
	for _, c := range []struct {
		period time.Duration
		at     time.Time
		want   time.Time
	}{
		{time.Hour, base, base},
		{time.Hour, base.Add(time.Hour - time.Microsecond), base},
		{time.Hour, base.Add(time.Hour), base.Add(time.Hour)},
		{24 * time.Hour, base.Add(25 * time.Hour), base.Add(24 * time.Hour)},
		// A "month" of config files is 30 days since the epoch.
		{30 * 24 * time.Hour, base, time.Date(2025, 12, 8, 0, 0, 0, 0, time.UTC)},
		{time.Hour, base.Add(1500 * time.Nanosecond), base},
	} {
		w := ledger.WindowAt(c.period, c.at)
		if !w.Start.Equal(c.want) || w.Period != c.period || !w.Contains(c.at) || w.Contains(w.End()) {
			t.Errorf("WindowAt(%v, %v) = %v, want the window from %v", c.period, c.at, w, c.want)
		}
	}
}

// TestWindowOf: the window of a store's decision is the store's window,
// Aligned and FirstHit.
func TestWindowOf(t *testing.T) {
	clock := floodgatetest.NewFakeClock(base.Add(17*time.Minute + 3*time.Microsecond))
	s := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer s.Close()
	l, err := floodgate.New(s, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	aligned := floodgate.Limit{Limit: 10, Period: time.Hour}
	firstHit := floodgate.Limit{Limit: 10, Period: time.Hour, Window: floodgate.FirstHit}
	first := clock.Now()
	key := func(l floodgate.Limit) string { return "k" + string(l.Window) }
	for _, lim := range []floodgate.Limit{aligned, firstHit} {
		d, err := l.Peek(t.Context(), key(lim), lim)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := ledger.WindowOf(lim, d); ok {
			t.Errorf("%v: WindowOf an empty counter = %v, want none", lim, w)
		}
		if _, err := l.Allow(t.Context(), key(lim), lim); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(20 * time.Minute)
	for _, c := range []struct {
		lim   floodgate.Limit
		start time.Time
	}{{aligned, base}, {firstHit, first}} {
		d, err := l.Allow(t.Context(), key(c.lim), c.lim)
		if err != nil {
			t.Fatal(err)
		}
		if w, ok := ledger.WindowOf(c.lim, d); !ok || !w.Start.Equal(c.start) || w.Period != time.Hour {
			t.Errorf("%v: WindowOf = %v, %v; want the window from %v", c.lim, w, ok, c.start)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		prefix, end string
		ok          bool
	}{{"", "", false}, {"a", "b", true}, {"a\xff", "b", true}, {"\xff\xff", "", false}, {"ab\x00", "ab\x01", true}} {
		if end, ok := ledger.PrefixEnd(c.prefix); end != c.end || ok != c.ok {
			t.Errorf("PrefixEnd(%q) = %q, %v; want %q, %v", c.prefix, end, ok, c.end, c.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	e := ledger.Entry{Key: "k", Limit: floodgate.Limit{Limit: 10, Period: time.Hour}, Window: base, Units: 1, ID: "a", At: base}
	if err := ledger.Check([]ledger.Entry{e}); err != nil {
		t.Errorf("Check of a good entry: %v", err)
	}
	other := e
	other.Key = "k2"
	if err := ledger.Check([]ledger.Entry{e, other}); err != nil {
		t.Errorf("Check of one ID on two keys: %v", err)
	}
	err := ledger.Check([]ledger.Entry{e, other, e})
	var ie *floodgate.ItemError
	if !errors.Is(err, floodgate.ErrInvalidRequest) || !errors.As(err, &ie) || ie.Index != 2 {
		t.Errorf("Check of a batch with one commit twice: %v, want an ItemError of index 2", err)
	}
}

func openSQLite(t *testing.T) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func record(t *testing.T, s ledger.Store, es ...ledger.Entry) {
	t.Helper()
	if _, err := s.Record(t.Context(), es); err != nil {
		t.Fatal(err)
	}
}

func TestWriteReport(t *testing.T) {
	s := openSQLite(t)
	q := floodgate.Limit{Limit: 1000, Period: 24 * time.Hour}
	record(t, s,
		ledger.Entry{Key: "acme", Limit: q, Window: base, Units: 10, ID: "r1", At: base.Add(time.Hour + 1500*time.Microsecond)},
		ledger.Entry{Key: "acme", Limit: q, Window: base, Units: 5, ID: "r2", At: base.Add(2 * time.Hour)},
		ledger.Entry{Key: "bad\xffutf8", Limit: floodgate.Limit{Limit: 7, Period: time.Hour, Window: floodgate.FirstHit}, Window: base.Add(time.Minute), Units: 1, ID: "r1", At: base.Add(time.Minute)},
		ledger.Entry{Key: "a,\"quoted\"", Limit: q, Window: base, Units: 2, ID: "r1", At: base},
	)
	var csv bytes.Buffer
	if err := ledger.WriteReport(t.Context(), &csv, s, ledger.Query{Limit: 1}, ledger.CSV); err != nil {
		t.Fatal(err)
	}
	want := `key,algorithm,limit,period,period_us,alignment,window_start,window_end,units,entries,first_at,last_at
"a,""quoted""",fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,2,1,2026-01-05T00:00:00Z,2026-01-05T00:00:00Z
acme,fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,15,2,2026-01-05T01:00:00.0015Z,2026-01-05T02:00:00Z
` + "bad\xffutf8" + `,fixed_window,7,1h0m0s,3600000000,first_hit,2026-01-05T00:01:00Z,2026-01-05T01:01:00Z,1,1,2026-01-05T00:01:00Z,2026-01-05T00:01:00Z
`
	if csv.String() != want {
		t.Errorf("CSV report:\n%s\nwant:\n%s", csv.String(), want)
	}

	var js bytes.Buffer
	if err := ledger.WriteReport(t.Context(), &js, s, ledger.Query{KeyPrefix: "a"}, ledger.JSON); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(js.Bytes(), &rows); err != nil {
		t.Fatalf("JSON report %q: %v", js.String(), err)
	}
	if len(rows) != 2 || rows[1]["key"] != "acme" || rows[1]["units"] != 15.0 || rows[1]["first_at"] != "2026-01-05T01:00:00.0015Z" || rows[1]["period_us"] != 86400000000.0 {
		t.Errorf("JSON report: %s", js.String())
	}
	js.Reset()
	if err := ledger.WriteReport(t.Context(), &js, s, ledger.Query{KeyPrefix: "bad"}, ledger.JSON); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"key_base64":"YmFk/3V0Zjg="`) || strings.Contains(js.String(), `"key":`) {
		t.Errorf("JSON report of a key that is not UTF-8: %s", js.String())
	}
	js.Reset()
	if err := ledger.WriteReport(t.Context(), &js, s, ledger.Query{KeyPrefix: "none"}, ledger.JSON); err != nil || js.String() != "[]\n" {
		t.Errorf("empty JSON report = %q, %v; want []", js.String(), err)
	}

	if err := ledger.WriteReport(t.Context(), &js, s, ledger.Query{}, "xml"); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("format xml: %v", err)
	}
	if err := ledger.WriteReport(t.Context(), &js, s, ledger.Query{Limit: -1}, ledger.CSV); !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Errorf("a bad query: %v", err)
	}
}

// failing is a Store whose second page fails.
type failing struct {
	ledger.Store
	pages int
}

func (f *failing) Report(ctx context.Context, q ledger.Query) ([]ledger.Usage, error) {
	f.pages++
	if f.pages > 1 {
		return nil, errors.New("connection reset")
	}
	return f.Store.Report(ctx, q)
}

// TestWriteReportFails: a report cut by a failure returns the error, and
// JSON output is left incomplete rather than closed as if whole.
func TestWriteReportFails(t *testing.T) {
	s := openSQLite(t)
	q := floodgate.Limit{Limit: 1000, Period: time.Hour}
	record(t, s, ledger.Entry{Key: "a", Limit: q, Window: base, ID: "1", At: base}, ledger.Entry{Key: "b", Limit: q, Window: base, ID: "1", At: base})
	var out bytes.Buffer
	err := ledger.WriteReport(t.Context(), &out, &failing{Store: s}, ledger.Query{Limit: 1}, ledger.JSON)
	if err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Errorf("WriteReport with a failing second page: %v", err)
	}
	if json.Valid(out.Bytes()) {
		t.Errorf("a cut JSON report is valid JSON: %s", out.String())
	}
}

// TestReconcile: counters equal to the ledger, lost, ahead of it, and in
// another window; a repair raises the lost ones, never lowers one.
func TestReconcile(t *testing.T) {
	s := openSQLite(t)
	now := base.Add(30 * time.Minute)
	clock := floodgatetest.NewFakeClock(base)
	store := memstore.New(&memstore.Options{Clock: clock, SweepInterval: -1})
	defer store.Close()
	lim, err := floodgate.New(store, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	hourly := floodgate.Limit{Limit: 100, Period: time.Hour}
	firstHit := floodgate.Limit{Limit: 100, Period: time.Hour, Window: floodgate.FirstHit}
	take := func(key string, l floodgate.Limit, n int64) {
		t.Helper()
		if d, err := lim.AllowN(t.Context(), key, l, n); err != nil || !d.Allowed {
			t.Fatalf("AllowN(%s, %d) = %+v, %v", key, n, d, err)
		}
	}
	entry := func(key string, l floodgate.Limit, window time.Time, units int64) ledger.Entry {
		return ledger.Entry{Key: key, Limit: l, Window: window, Units: units, ID: "c" + key, At: window.Add(time.Minute)}
	}
	record(t, s,
		entry("equal", hourly, base, 10),
		entry("lost", hourly, base, 20),
		entry("ahead", hourly, base, 5),
		entry("over", hourly, base, 130), // charged beyond the limit
		entry("fh-lost", firstHit, base.Add(10*time.Minute), 7),
		entry("old", hourly, base.Add(-time.Hour), 50), // a closed window: no counter to compare
	)
	take("equal", hourly, 10)
	take("ahead", hourly, 9) // 4 held, not committed yet
	take("over", hourly, 100)
	clock.Set(base.Add(25 * time.Minute))
	take("fh-lost", firstHit, 3) // the store lost the window of 10m and opened one at 25m

	clock.Set(now)
	drifts, err := ledger.Reconcile(t.Context(), s, ledger.PeekUsed(lim), &ledger.ReconcileOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		key              string
		counter, missing int64
		behind, repaired bool
	}
	summary := func(ds []ledger.Drift) []got {
		var out []got
		for _, d := range ds {
			out = append(out, got{d.Key, d.Counter, d.Missing(), d.Behind(), d.Repaired})
		}
		return out
	}
	want := []got{{"ahead", 9, 0, false, false}, {"fh-lost", 0, 7, true, false}, {"lost", 0, 20, true, false}}
	if g := summary(drifts); !equal(g, want) {
		t.Errorf("Reconcile = %+v\nwant %+v", g, want)
	}

	drifts, err = ledger.Reconcile(t.Context(), s, ledger.PeekUsed(lim), &ledger.ReconcileOptions{Now: now, Repair: ledger.Raise(lim)})
	if err != nil {
		t.Fatal(err)
	}
	want = []got{{"ahead", 9, 0, false, false}, {"fh-lost", 0, 7, true, true}, {"lost", 0, 20, true, true}}
	if g := summary(drifts); !equal(g, want) {
		t.Errorf("Reconcile with Repair = %+v\nwant %+v", g, want)
	}
	for _, d := range drifts {
		if d.RepairErr != nil {
			t.Errorf("%s: %v", d.Key, d.RepairErr)
		}
	}
	// After the repair the lost counter holds the ledger's units; the
	// first_hit one was raised in the window the store opened (its own,
	// from 25m) to the larger of its 3 and the ledger's 7, on the side of
	// denying (the units count until 85m, not 70m).
	if d, _ := lim.Peek(t.Context(), "lost", hourly); d.Remaining != 80 {
		t.Errorf("lost: Remaining %d after the repair, want 80", d.Remaining)
	}
	if d, _ := lim.Peek(t.Context(), "fh-lost", firstHit); d.Remaining != 93 {
		t.Errorf("fh-lost: Remaining %d after the repair, want 100-max(3, 7) = 93", d.Remaining)
	}
	drifts, err = ledger.Reconcile(t.Context(), s, ledger.PeekUsed(lim), &ledger.ReconcileOptions{Now: now, KeyPrefix: "l"})
	if err != nil || len(drifts) != 0 {
		t.Errorf("Reconcile of l* after the repair = %+v, %v; want no drift", summary(drifts), err)
	}

	// A limit raised since the commits: the counter is read under it.
	drifts, err = ledger.Reconcile(t.Context(), s, ledger.PeekUsed(lim), &ledger.ReconcileOptions{Now: now, KeyPrefix: "over",
		Limit: func(key string, recorded floodgate.Limit) floodgate.Limit { recorded.Limit = 200; return recorded }})
	if want := []got{{"over", 100, 30, true, false}}; err != nil || !equal(summary(drifts), want) {
		t.Errorf("Reconcile of over under a limit of 200 = %+v, %v; want %+v", summary(drifts), err, want)
	}
	_, err = ledger.Reconcile(t.Context(), s, ledger.PeekUsed(lim), &ledger.ReconcileOptions{Now: now,
		Limit: func(key string, recorded floodgate.Limit) floodgate.Limit {
			recorded.Period = time.Minute
			return recorded
		}})
	if err == nil {
		t.Error("Reconcile under a limit of another period: no error")
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
