package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// runCmd runs the CLI and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

var day = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// billing is what the report tests record: two tenants over two days.
func billing() []ledger.Entry {
	daily := floodgate.Limit{Limit: 1000, Period: 24 * time.Hour}
	return []ledger.Entry{
		{Key: "d|billing|tenant=acme", Limit: daily, Window: day, Units: 700, ID: "r1", At: day.Add(9 * time.Hour)},
		{Key: "d|billing|tenant=acme", Limit: daily, Window: day, Units: 50, ID: "r2", At: day.Add(17 * time.Hour)},
		{Key: "d|billing|tenant=acme", Limit: daily, Window: day.Add(24 * time.Hour), Units: 3, ID: "r3", At: day.Add(25 * time.Hour)},
		{Key: "d|billing|tenant=globex", Limit: daily, Window: day, Units: 20, ID: "r1", At: day.Add(10 * time.Hour)},
		{Key: "d|other|k=v", Limit: daily, Window: day, Units: 1, ID: "r1", At: day},
	}
}

func sqliteLedger(t *testing.T, es ...ledger.Entry) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Record(t.Context(), es); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLedgerReport(t *testing.T) {
	path := sqliteLedger(t, billing()...)
	testLedgerReport(t, path)
}

func TestLedgerReportPostgres(t *testing.T) {
	url := pgtest.Database(t)
	l, err := postgres.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Record(t.Context(), billing()); err != nil {
		t.Fatal(err)
	}
	l.Close()
	testLedgerReport(t, url)
}

func testLedgerReport(t *testing.T, spec string) {
	code, out, errOut := runCmd(t, "ledger", "report", "-ledger", spec, "-key", "d|billing|", "-from", "2026-01-05", "-to", "2026-01-06T00:00:00Z")
	want := `key,algorithm,limit,period,period_us,alignment,window_start,window_end,units,entries,first_at,last_at
d|billing|tenant=acme,fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,750,2,2026-01-05T09:00:00Z,2026-01-05T17:00:00Z
d|billing|tenant=globex,fixed_window,1000,24h0m0s,86400000000,aligned,2026-01-05T00:00:00Z,2026-01-06T00:00:00Z,20,1,2026-01-05T10:00:00Z,2026-01-05T10:00:00Z
`
	if code != 0 || out != want {
		t.Errorf("report CSV: exit %d\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	code, out, errOut = runCmd(t, "ledger", "report", "-ledger", spec, "-format", "json")
	var rows []struct {
		Key   string `json:"key"`
		Units int64  `json:"units"`
	}
	if err := json.Unmarshal([]byte(out), &rows); code != 0 || err != nil || len(rows) != 4 || rows[1].Units != 3 || rows[3].Key != "d|other|k=v" {
		t.Errorf("report JSON: exit %d, %v\n%s\nstderr: %s", code, err, out, errOut)
	}
}

func TestLedgerBadFlags(t *testing.T) {
	path := sqliteLedger(t)
	// One domain in two files, as envoyproxy/ratelimit's
	// MERGE_DOMAIN_CONFIG takes it.
	split := t.TempDir()
	for name, text := range map[string]string{
		"a.yaml": "domain: shop\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"b.yaml": "domain: shop\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	} {
		if err := os.WriteFile(filepath.Join(split, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", []string{"ledger"}, 2, "usage: floodgate ledger"},
		{"unknown subcommand", []string{"ledger", "audit"}, 2, `unknown command "audit"`},
		{"report without ledger", []string{"ledger", "report"}, 2, "-ledger: required"},
		{"bad from", []string{"ledger", "report", "-ledger", path, "-from", "yesterday"}, 2, "-from:"},
		{"to before from", []string{"ledger", "report", "-ledger", path, "-from", "2026-02-01", "-to", "2026-01-01"}, 2, "to:"},
		{"bad format", []string{"ledger", "report", "-ledger", path, "-format", "xml"}, 2, "-format"},
		{"missing file", []string{"ledger", "report", "-ledger", filepath.Join(t.TempDir(), "nope.db")}, 1, "no ledger at"},
		{"stray argument", []string{"ledger", "report", "-ledger", path, "x"}, 2, "unexpected argument"},
		{"reconcile without ledger", []string{"ledger", "reconcile"}, 2, "-ledger: required"},
		{"limit and config", []string{"ledger", "reconcile", "-ledger", path, "-limit", "1/hour", "-config", "x"}, 2, "give one"},
		{"bad limit", []string{"ledger", "reconcile", "-ledger", path, "-limit", "lots"}, 2, "-limit"},
		{"bad period", []string{"ledger", "reconcile", "-ledger", path, "-limit", "10/fortnight"}, 2, "fortnight"},
		{"bad config", []string{"ledger", "reconcile", "-ledger", path, "-config", filepath.Join(t.TempDir(), "none.yaml")}, 2, "-config"},
		{"memory", []string{"ledger", "reconcile", "-ledger", path}, 0, "nothing to reconcile"},
		{"missing file", []string{"ledger", "reconcile", "-ledger", filepath.Join(t.TempDir(), "nope.db"), "-redis", "redis://127.0.0.1:1"}, 2, "no ledger at"},
		{"split domain", []string{"ledger", "reconcile", "-ledger", path, "-config", split}, 2, "already defined"},
		{"split domain merged", []string{"ledger", "reconcile", "-ledger", path, "-config", split, "-merge-domain-config"}, 0, "nothing to reconcile"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, c.args...)
			if code != c.code || !strings.Contains(errOut, c.stderr) {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, c.code, errOut, c.stderr)
			}
		})
	}
}

func TestParseLimitSpec(t *testing.T) {
	for _, c := range []struct {
		spec string
		want floodgate.Limit
	}{
		{"10000/month", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 10000, Period: 30 * 24 * time.Hour}},
		{"500/24h,first_hit", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 500, Period: 24 * time.Hour, Window: floodgate.FirstHit}},
		{"5/Hour,aligned", floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 5, Period: time.Hour, Window: floodgate.Aligned}},
	} {
		if got, err := parseLimitSpec(c.spec); err != nil || got != c.want {
			t.Errorf("parseLimitSpec(%q) = %v, %v; want %v", c.spec, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "10", "x/hour", "10/", "10/hour,sliding", "-1/hour", "10/0s"} {
		if _, err := parseLimitSpec(bad); err == nil {
			t.Errorf("parseLimitSpec(%q): no error", bad)
		}
	}
}

// TestLedgerReconcile: counters in a real Redis against a ledger in an
// SQLite file: a counter equal to the ledger, one lost (a Redis that
// restarted empty), one ahead; -repair raises the lost one, and then only
// the one ahead drifts.
func TestLedgerReconcile(t *testing.T) {
	redis := redistest.Standalone(t)
	url := "redis://" + redis.Addr
	// A 30-day aligned window, from the clock: Redis decides by its own.
	monthly := floodgate.Limit{Limit: 1000, Period: 30 * 24 * time.Hour}
	now := time.Now()
	w := ledger.WindowAt(monthly.Period, now).Start
	entry := func(key string, units int64) ledger.Entry {
		return ledger.Entry{Key: key, Limit: monthly, Window: w, Units: units, ID: "c1", At: now}
	}
	path := sqliteLedger(t, entry("d|billing|tenant=equal", 100), entry("d|billing|tenant=lost", 250), entry("d|billing|tenant=ahead", 10),
		entry("other", 5))

	store, err := redisstore.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := floodgate.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	take := func(key string, n int64) {
		t.Helper()
		if d, err := lim.AllowN(t.Context(), key, monthly, n); err != nil || !d.Allowed {
			t.Fatalf("AllowN(%q, %d) = %+v, %v", key, n, d, err)
		}
	}
	take("d|billing|tenant=equal", 100)
	take("d|billing|tenant=ahead", 14)
	take("other", 5)

	code, out, errOut := runCmd(t, "ledger", "reconcile", "-ledger", path, "-redis", url, "-key", "d|")
	if code != 1 || !strings.Contains(out, `"d|billing|tenant=lost"`) || !strings.Contains(out, "behind by 250\n") ||
		!strings.Contains(out, "ahead") || strings.Contains(out, "tenant=equal") || strings.Contains(out, "repaired\n") ||
		!strings.Contains(out, "2 drifting: 1 behind (0 repaired), 1 ahead") {
		t.Errorf("reconcile: exit %d\n%s\nstderr: %s", code, out, errOut)
	}

	code, out, errOut = runCmd(t, "ledger", "reconcile", "-ledger", path, "-redis", url, "-repair", "-key", "d|billing|tenant=l")
	if code != 1 || !strings.Contains(out, "behind by 250, repaired") {
		t.Errorf("reconcile -repair: exit %d\n%s\nstderr: %s", code, out, errOut)
	}
	if d, err := lim.Peek(t.Context(), "d|billing|tenant=lost", monthly); err != nil || d.Remaining != 750 {
		t.Errorf("the repaired counter: Remaining %d, %v; want 750", d.Remaining, err)
	}
	code, out, errOut = runCmd(t, "ledger", "reconcile", "-ledger", path, "-redis", url, "-key", "d|billing|tenant=l")
	if code != 0 || !strings.Contains(out, "no drift") {
		t.Errorf("reconcile after the repair: exit %d\n%s\nstderr: %s", code, out, errOut)
	}

	// Under the limit a config gives the rule now (raised to 2000), the
	// counter of "ahead" reads the same; a key that is no rule's keeps
	// the recorded limit.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "billing.yaml"), []byte(`
domain: billing
descriptors:
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 2000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCmd(t, "ledger", "reconcile", "-ledger", path, "-redis", url, "-config", dir)
	if code != 1 || !strings.Contains(squash(out), `"d|billing|tenant=ahead" [`) || !strings.Contains(squash(out), ") 2000 10 14 ahead") ||
		!strings.Contains(out, "1 drifting") {
		t.Errorf("reconcile -config: exit %d\n%s\nstderr: %s", code, out, errOut)
	}
	// -limit with another period than the recorded one stops with an error.
	code, _, errOut = runCmd(t, "ledger", "reconcile", "-ledger", path, "-redis", url, "-limit", "5/hour")
	if code != 2 || !strings.Contains(errOut, "period") {
		t.Errorf("reconcile -limit 5/hour: exit %d, stderr %s", code, errOut)
	}
}

// squash makes every run of blanks in s one space.
func squash(s string) string {
	var lines []string
	for line := range strings.Lines(s) {
		lines = append(lines, strings.Join(strings.Fields(line), " "))
	}
	return strings.Join(lines, "\n")
}

func TestRuleOf(t *testing.T) {
	cfg := loadConfig(t, `
domain: a|b
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: path
    value: /api*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 20}
`)
	for _, c := range []struct {
		key  string
		want int64
	}{
		{"d|a%7Cb|user=42", 10},
		{"d|a%7Cb|user=x%3Dy", 10},
		{"d|a%7Cb|path=/api*", 20},
		{"d|a%7Cb|path=/apix", 0}, // a shared wildcard's counter holds the pattern
		{"d|a%7Cb|nope=1", 0},
		{"a%7Cb|user=42", 0},
		{"d|a%7Cb|user=%zz", 0},
		{"d|other|user=1", 0},
	} {
		var got int64
		if r := ruleOf(cfg, c.key); r != nil {
			got = r.Limit.Limit
		}
		if got != c.want {
			t.Errorf("ruleOf(%q): limit %d, want %d", c.key, got, c.want)
		}
	}
}

func loadConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
