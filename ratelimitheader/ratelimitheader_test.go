package ratelimitheader_test

import (
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
)

func perMinute(name string, n int64) floodgate.Limit {
	return floodgate.Limit{Name: name, Limit: n, Period: time.Minute}
}

// mustParse parses a field value as an sf-list and fails the test if it
// does not parse.
func mustParse(t *testing.T, field, v string) []sfItem {
	t.Helper()
	items, err := parseList(v)
	if err != nil {
		t.Fatalf("%s: %q does not parse as a structured field list: %v", field, v, err)
	}
	return items
}

// TestDraftExamples produces the examples of draft-ietf-httpapi-ratelimit-
// headers-11 (sections 3.2, 4.2 and appendix B) from limits and decisions.
// The draft writes some lists with "," and some with ", "; RFC 9651
// serializes ", ", so each example is compared after parsing both, and the
// exact text is checked where the draft uses the serialized form.
func TestDraftExamples(t *testing.T) {
	t.Parallel()
	policy := []struct {
		name   string
		limits []floodgate.Limit
		draft  string
	}{
		{"3", []floodgate.Limit{{Name: "burst", Limit: 100, Period: time.Minute}, {Name: "daily", Limit: 1000, Period: 24 * time.Hour}},
			`"burst";q=100;w=60,"daily";q=1000;w=86400`},
		{"3.2 window", []floodgate.Limit{{Name: "default", Limit: 100, Period: 10 * time.Second}}, `"default";q=100;w=10`},
		{"3.2 multiple", []floodgate.Limit{perMinute("permin", 50), {Name: "perhr", Limit: 1000, Period: time.Hour}},
			`"permin";q=50;w=60,"perhr";q=1000;w=3600`},
		{"B.1.3", []floodgate.Limit{perMinute("basic", 100)}, `"basic";q=100;w=60`},
		{"B.2.1", []floodgate.Limit{perMinute("fixedwindow", 100)}, `"fixedwindow";q=100;w=60`},
		{"B.2.3", []floodgate.Limit{{Name: "dynamic", Limit: 15, Period: 20 * time.Second}}, `"dynamic";q=15;w=20`},
		{"B.3.1", []floodgate.Limit{{Name: "hour", Limit: 1000, Period: time.Hour}, {Name: "day", Limit: 5000, Period: 24 * time.Hour}},
			`"hour";q=1000;w=3600, "day";q=5000;w=86400`},
		{"8.5", []floodgate.Limit{{Name: "somepolicy", Limit: 10000, Period: 1000 * time.Second}}, `"somepolicy";q=10000;w=1000`},
	}
	for _, tc := range policy {
		t.Run("policy/"+tc.name, func(t *testing.T) {
			got := ratelimitheader.Policy(tc.limits...)
			if !reflect.DeepEqual(mustParse(t, "got", got), mustParse(t, "draft", tc.draft)) {
				t.Errorf("Policy = %s, want %s", got, tc.draft)
			}
			if want := strings.ReplaceAll(strings.ReplaceAll(tc.draft, ",", ", "), ",  ", ", "); got != want {
				t.Errorf("Policy = %s, want the serialization %s", got, want)
			}
		})
	}

	state := []struct {
		name  string
		limit floodgate.Limit
		d     floodgate.Decision
		draft string
	}{
		{"4", perMinute("default", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: 30 * time.Second}, `"default";r=50;t=30`},
		{"B.1.1", perMinute("default", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 0, ResetAfter: 50 * time.Second}, `"default";r=0;t=50`},
		{"B.1.2", floodgate.Limit{Name: "dayLimit", Limit: 5000, Period: 24 * time.Hour},
			floodgate.Decision{Allowed: true, Limit: 5000, Remaining: 100, ResetAfter: 10 * time.Hour}, `"dayLimit";r=100;t=36000`},
		{"B.1.3", perMinute("basic", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 60, ResetAfter: 58 * time.Second}, `"basic";r=60;t=58`},
		// The draft's "after 2 seconds" is 58 s of window left; our
		// effective window is rounded up, so 57.2 s is 58 as well.
		{"B.1.3 rounded up", perMinute("basic", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 60, ResetAfter: 57200 * time.Millisecond}, `"basic";r=60;t=58`},
		{"B.1.4", perMinute("default", 100), floodgate.Decision{Limit: 100, Remaining: 0, ResetAfter: 5 * time.Second, RetryAfter: 5 * time.Second}, `"default";r=0;t=5`},
		{"B.2.1", perMinute("fixedwindow", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 50 * time.Second}, `"fixedwindow";r=99;t=50`},
		{"B.2.2", perMinute("dynamic", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 9, ResetAfter: 50 * time.Second}, `"dynamic";r=9;t=50`},
		{"7", perMinute("default", 100), floodgate.Decision{Allowed: true, Limit: 100, Remaining: 1, ResetAfter: 7 * time.Second}, `"default";r=1;t=7`},
		{"8.5", floodgate.Limit{Name: "daily", Limit: 100, Period: 24 * time.Hour},
			floodgate.Decision{Allowed: true, Limit: 100, Remaining: 1, ResetAfter: 24 * time.Hour}, `"daily";r=1;t=86400`},
	}
	for _, tc := range state {
		t.Run("ratelimit/"+tc.name, func(t *testing.T) {
			got := ratelimitheader.RateLimit([]floodgate.Limit{tc.limit}, []floodgate.Decision{tc.d})
			if got != tc.draft {
				t.Errorf("RateLimit = %s, want %s", got, tc.draft)
			}
			mustParse(t, "got", got)
		})
	}

	// B.1.4: a throttled response; Retry-After and the effective window
	// reference the same moment.
	h := http.Header{}
	ratelimitheader.Set(h, perMinute("default", 100), floodgate.Decision{Limit: 100, ResetAfter: 5 * time.Second, RetryAfter: 5 * time.Second}, nil)
	if got, want := h.Get("Retry-After"), "5"; got != want {
		t.Errorf("B.1.4 Retry-After = %q, want %q", got, want)
	}
	if got, want := h.Get("RateLimit"), `"default";r=0;t=5`; got != want {
		t.Errorf("B.1.4 RateLimit = %q, want %q", got, want)
	}
}

// TestGrammar checks random limits and decisions against the draft's
// grammar: both fields parse as sf-lists of Items whose value is a String
// naming the policy, with the required parameters as non-negative
// Integers of at most 15 digits, w above zero, t no later than Retry-After.
func TestGrammar(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"", "default", `quo"te`, `back\slash`, "sp ace", "ünïcode", "tab\there", "a,b;c=d", strings.Repeat("x", 300)}
	algs := floodgate.Algorithms
	durations := []time.Duration{0, time.Microsecond, 999 * time.Millisecond, time.Second, time.Second + 1, time.Hour, floodgate.MaxPeriod, 1 << 62}
	for range 2000 {
		n := 1 + rng.IntN(3)
		ls := make([]floodgate.Limit, n)
		ds := make([]floodgate.Decision, n)
		for i := range ls {
			alg := algs[rng.IntN(len(algs))]
			ls[i] = floodgate.Limit{Name: names[rng.IntN(len(names))], Algorithm: alg, Limit: rng.Int64N(floodgate.MaxLimit + 1),
				Period: time.Duration(1+rng.Int64N(int64(floodgate.MaxPeriod/time.Microsecond))) * time.Microsecond}
			if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
				ls[i].Burst = rng.Int64N(floodgate.MaxLimit + 1)
			}
			ds[i] = floodgate.Decision{Allowed: rng.IntN(2) == 0, Limit: ls[i].Capacity(), Remaining: rng.Int64N(1 << 62),
				ResetAfter: durations[rng.IntN(len(durations))], RetryAfter: durations[rng.IntN(len(durations))]}
			if !ds[i].Allowed && rng.IntN(5) == 0 {
				ds[i].RetryAfter = floodgate.Never
			}
		}
		fields := ratelimitheader.Fields(ls, ds, &ratelimitheader.Options{Legacy: true})
		h := http.Header{}
		for _, f := range fields {
			if f.Name != http.CanonicalHeaderKey(f.Name) {
				t.Fatalf("field name %q is not canonical", f.Name)
			}
			h.Add(f.Name, f.Value)
		}
		retryAfter := int64(-1)
		if v := h.Get("Retry-After"); v != "" {
			retryAfter = mustInt(t, "Retry-After", v)
		}
		policy := mustParse(t, "RateLimit-Policy", h.Get("RateLimit-Policy"))
		state := mustParse(t, "RateLimit", h.Get("RateLimit"))
		if len(policy) != n || len(state) != n {
			t.Fatalf("%d limits gave %d policies and %d states", n, len(policy), len(state))
		}
		for i := range n {
			name := ratelimitheader.PolicyName(ls, i)
			for _, it := range []sfItem{policy[i], state[i]} {
				s, ok := it.Value.(string)
				if !ok {
					t.Fatalf("item %d is %T, want a String", i, it.Value)
				}
				if ratelimitheader.CheckName(name) == nil && s != name {
					t.Errorf("item %d names %q, want %q", i, s, name)
				}
			}
			checkInt(t, policy[i], "q", true, 0)
			checkInt(t, state[i], "r", true, 0)
			if ls[i].Algorithm == floodgate.Concurrency {
				if v, _ := policy[i].param("qu"); v != "concurrent-requests" {
					t.Errorf("concurrency policy has qu=%v", v)
				}
				continue
			}
			checkInt(t, policy[i], "w", true, 1)
			tt := checkInt(t, state[i], "t", true, 0)
			if !ds[i].Allowed && ds[i].RetryAfter > 0 && retryAfter >= 0 && ds[i].RetryAfter <= time.Duration(retryAfter)*time.Second && tt > retryAfter {
				t.Errorf("t=%d is after Retry-After %d", tt, retryAfter)
			}
		}
		for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			mustInt(t, name, h.Get(name))
		}
	}
}

func mustInt(t *testing.T, field, v string) int64 {
	t.Helper()
	items := mustParse(t, field, v)
	if len(items) != 1 || len(items[0].Params) != 0 {
		t.Fatalf("%s: %q is not one bare integer", field, v)
	}
	n, ok := items[0].Value.(int64)
	if !ok || n < 0 {
		t.Fatalf("%s: %q is not a non-negative integer", field, v)
	}
	return n
}

func checkInt(t *testing.T, it sfItem, key string, required bool, least int64) int64 {
	t.Helper()
	v, ok := it.param(key)
	if !ok {
		if required {
			t.Errorf("item %v has no %s", it, key)
		}
		return 0
	}
	n, ok := v.(int64)
	if !ok || n < least || n > ratelimitheader.MaxInteger {
		t.Errorf("%s=%v, want an Integer from %d to %d", key, v, least, int64(ratelimitheader.MaxInteger))
	}
	return n
}

func TestPolicyWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		limit floodgate.Limit
		want  string
	}{
		{"fixed window", floodgate.Limit{Limit: 60, Period: time.Minute}, `"default";q=60;w=60`},
		{"sub-second period rounds up", floodgate.Limit{Limit: 5, Period: 100 * time.Millisecond}, `"default";q=5;w=1`},
		{"period rounds up", floodgate.Limit{Limit: 5, Period: 1500 * time.Millisecond}, `"default";q=5;w=2`},
		{"sliding window log", floodgate.Limit{Algorithm: floodgate.SlidingWindowLog, Limit: 10, Period: time.Hour}, `"default";q=10;w=3600`},
		{"bucket without burst", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second}, `"default";q=10;w=1`},
		{"bucket refill time", floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20}, `"default";q=20;w=2`},
		{"bucket refill rounds up", floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 3, Period: time.Second, Burst: 10}, `"default";q=10;w=4`},
		{"bucket burst below limit", floodgate.Limit{Algorithm: floodgate.TokenBucket, Limit: 100, Period: time.Minute, Burst: 10}, `"default";q=10;w=6`},
		{"zero limit", floodgate.Limit{Limit: 0, Period: time.Minute}, `"default";q=0;w=60`},
		{"concurrency", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 5, Period: time.Minute}, `"default";q=5;qu="concurrent-requests"`},
		{"escaped name", floodgate.Limit{Name: `a "b" \c`, Limit: 1, Period: time.Second}, `"a \"b\" \\c";q=1;w=1`},
		{"unprintable name", floodgate.Limit{Name: "é\n1", Limit: 1, Period: time.Second}, `"__1";q=1;w=1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratelimitheader.Policy(tc.limit); got != tc.want {
				t.Errorf("Policy = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRateLimitField(t *testing.T) {
	t.Parallel()
	gcra := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20}
	for _, tc := range []struct {
		name  string
		limit floodgate.Limit
		d     floodgate.Decision
		want  string
	}{
		{"reset rounds up", perMinute("", 60), floodgate.Decision{Allowed: true, Remaining: 59, ResetAfter: 58001 * time.Millisecond}, `"default";r=59;t=59`},
		{"fresh", perMinute("", 60), floodgate.Decision{Allowed: true, Remaining: 60}, `"default";r=60;t=0`},
		{"denial: t no later than Retry-After", gcra, floodgate.Decision{Remaining: 0, ResetAfter: 2 * time.Second, RetryAfter: 100 * time.Millisecond}, `"default";r=0;t=1`},
		{"never", perMinute("", 0), floodgate.Decision{ResetAfter: 0, RetryAfter: floodgate.Never}, `"default";r=0;t=0`},
		{"clamped", perMinute("", 60), floodgate.Decision{Allowed: true, Remaining: 1 << 62, ResetAfter: 1 << 62}, `"default";r=999999999999999;t=4611686019`},
		{"negative clamped", perMinute("", 60), floodgate.Decision{Allowed: true, Remaining: -5}, `"default";r=0;t=0`},
		{"concurrency has no window", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 5, Period: time.Minute},
			floodgate.Decision{Allowed: true, Remaining: 3, ResetAfter: time.Minute}, `"default";r=3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ratelimitheader.RateLimit([]floodgate.Limit{tc.limit}, []floodgate.Decision{tc.d})
			if got != tc.want {
				t.Errorf("RateLimit = %s, want %s", got, tc.want)
			}
		})
	}
	if got := ratelimitheader.RateLimit([]floodgate.Limit{perMinute("", 1)}, nil); got != "" {
		t.Errorf("RateLimit with no decisions = %q, want empty", got)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{time.Nanosecond, "1"},
		{200 * time.Millisecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Microsecond, "2"},
		{time.Hour, "3600"},
		{floodgate.Never, ""},
		{1<<63 - 1, "9223372037"},
	} {
		if got := ratelimitheader.RetryAfter(tc.d); got != tc.want {
			t.Errorf("RetryAfter(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestSetEach(t *testing.T) {
	t.Parallel()
	perSecond := floodgate.Limit{Name: "per-second", Limit: 10, Period: time.Second}
	perHour := floodgate.Limit{Name: "per-hour", Limit: 1000, Period: time.Hour}
	limits := []floodgate.Limit{perSecond, perHour}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	denied := []floodgate.Decision{
		{Limit: 10, Remaining: 0, ResetAfter: 800 * time.Millisecond, RetryAfter: 800 * time.Millisecond, Now: now},
		{Limit: 1000, Remaining: 500, ResetAfter: 30 * time.Minute, Now: now},
	}

	t.Run("denied", func(t *testing.T) {
		h := http.Header{"Retry-After": {"stale"}, "Ratelimit": {"stale"}}
		ratelimitheader.SetEach(h, limits, denied, &ratelimitheader.Options{Legacy: true})
		want := http.Header{
			"Ratelimit-Policy":      {`"per-second";q=10;w=1, "per-hour";q=1000;w=3600`},
			"Ratelimit":             {`"per-second";r=0;t=1, "per-hour";r=500;t=1800`},
			"Retry-After":           {"1"},
			"X-Ratelimit-Limit":     {"10"},
			"X-Ratelimit-Remaining": {"0"},
			"X-Ratelimit-Reset":     {"1"},
		}
		if !reflect.DeepEqual(h, want) {
			t.Errorf("header =\n%v\nwant\n%v", h, want)
		}
	})
	t.Run("legacy unix reset", func(t *testing.T) {
		h := http.Header{}
		ratelimitheader.SetEach(h, limits, denied, &ratelimitheader.Options{Legacy: true, LegacyResetUnix: true})
		if got, want := h.Get("X-RateLimit-Reset"), "1795953601"; got != want {
			t.Errorf("X-RateLimit-Reset = %s, want %s (%v + 0.8s, rounded up)", got, want, now.Unix())
		}
	})
	t.Run("allowed: no Retry-After, legacy reports the closest limit", func(t *testing.T) {
		h := http.Header{}
		ds := []floodgate.Decision{
			{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second},
			{Allowed: true, Limit: 1000, Remaining: 3, ResetAfter: time.Hour},
		}
		ratelimitheader.SetEach(h, limits, ds, &ratelimitheader.Options{Legacy: true})
		if h.Get("Retry-After") != "" {
			t.Errorf("Retry-After = %q on an allowed request", h.Get("Retry-After"))
		}
		if got := h.Get("X-RateLimit-Remaining") + "/" + h.Get("X-RateLimit-Limit") + "/" + h.Get("X-RateLimit-Reset"); got != "3/1000/3600" {
			t.Errorf("legacy = %s, want 3/1000/3600", got)
		}
	})
	t.Run("never: no Retry-After", func(t *testing.T) {
		h := http.Header{}
		ratelimitheader.Set(h, perMinute("", 0), floodgate.Decision{RetryAfter: floodgate.Never}, nil)
		if _, ok := h["Retry-After"]; ok {
			t.Errorf("Retry-After = %q for a request that can never pass", h.Get("Retry-After"))
		}
	})
	t.Run("unknown state: policy only", func(t *testing.T) {
		h := http.Header{"Ratelimit": {"stale"}}
		ratelimitheader.SetEach(h, limits, nil, &ratelimitheader.Options{Legacy: true})
		if len(h) != 1 || h.Get("RateLimit-Policy") == "" {
			t.Errorf("header = %v, want RateLimit-Policy alone", h)
		}
	})
	t.Run("omit policy", func(t *testing.T) {
		h := http.Header{}
		ratelimitheader.SetEach(h, limits, denied, &ratelimitheader.Options{OmitPolicy: true})
		if _, ok := h["Ratelimit-Policy"]; ok {
			t.Errorf("RateLimit-Policy written with OmitPolicy")
		}
	})
	t.Run("no limits", func(t *testing.T) {
		if f := ratelimitheader.Fields(nil, nil, nil); f != nil {
			t.Errorf("Fields(nil) = %v", f)
		}
	})
}

func TestPolicyName(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{{Limit: 10, Period: time.Second}, {Limit: 1000, Period: time.Hour}, {Name: "named", Limit: 1, Period: time.Minute}}
	for i, want := range []string{"10-per-1s", "1000-per-3600s", "named"} {
		if got := ratelimitheader.PolicyName(limits, i); got != want {
			t.Errorf("PolicyName(%d) = %q, want %q", i, got, want)
		}
	}
	if got := ratelimitheader.PolicyName(limits[:1], 0); got != "default" {
		t.Errorf("PolicyName of a lone unnamed limit = %q, want default", got)
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"": true, "default": true, `with "quotes" and \`: true, "tab\t": false, "ünïcode": false, "del\x7f": false,
		strings.Repeat("x", ratelimitheader.MaxNameLen): true, strings.Repeat("x", ratelimitheader.MaxNameLen+1): false,
	} {
		if err := ratelimitheader.CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%.20q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// FuzzPolicyName checks that any name gives a field that parses, and that a
// name CheckName accepts comes back unchanged.
func FuzzPolicyName(f *testing.F) {
	for _, s := range []string{"default", `"`, `\`, "a\"b\\c", "é", "\xff\xfe", "\x00", " "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v := ratelimitheader.Policy(floodgate.Limit{Name: name, Limit: 1, Period: time.Second})
		items, err := parseList(v)
		if err != nil {
			t.Fatalf("Policy(%q) = %s: %v", name, v, err)
		}
		if len(items) != 1 {
			t.Fatalf("Policy(%q) = %s: %d items", name, v, len(items))
		}
		if ratelimitheader.CheckName(name) == nil && name != "" && items[0].Value != name {
			t.Fatalf("Policy(%q) names %q", name, items[0].Value)
		}
	})
}

// TestCalendarHeaders: a calendar window's t and reset are the decision's
// true end, its w the calendar days of the unit, its name per unit.
func TestCalendarHeaders(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	l := floodgate.Limit{Limit: 1000, Calendar: floodgate.Calendar{Unit: floodgate.CalendarMonth, Location: ny}}
	now := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC) // local midnight
	_, end := l.Calendar.Window(now)
	d := floodgate.Decision{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: end.Sub(now), Now: now}
	if got, want := ratelimitheader.Policy(l), `"default";q=1000;w=2678400`; got != want {
		t.Errorf("Policy = %s, want %s", got, want)
	}
	if got, want := ratelimitheader.RateLimit([]floodgate.Limit{l}, []floodgate.Decision{d}), `"default";r=999;t=2674800`; got != want {
		t.Errorf("RateLimit = %s, want %s (743 hours)", got, want)
	}
	if got, want := ratelimitheader.PolicyName([]floodgate.Limit{l, l}, 0), "1000-per-month"; got != want {
		t.Errorf("PolicyName = %s, want %s", got, want)
	}
}

// TestAppendFields: AppendFields appends what Fields returns, keeps what
// dst held, and with room in dst allocates nothing for the slice.
func TestAppendFields(t *testing.T) {
	minute := floodgate.Limit{Algorithm: floodgate.FixedWindow, Limit: 60, Period: time.Minute}
	second := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20}
	cases := []struct {
		limits []floodgate.Limit
		ds     []floodgate.Decision
		opts   *ratelimitheader.Options
	}{
		{nil, nil, nil},
		{[]floodgate.Limit{minute}, []floodgate.Decision{{Allowed: true, Remaining: 59, ResetAfter: 59 * time.Second}}, nil},
		{[]floodgate.Limit{minute, second}, []floodgate.Decision{{Allowed: true, Remaining: 3}, {Remaining: 0, RetryAfter: 200 * time.Millisecond}},
			&ratelimitheader.Options{Legacy: true}},
		{[]floodgate.Limit{minute}, nil, &ratelimitheader.Options{OmitPolicy: true}},
	}
	for i, c := range cases {
		want := ratelimitheader.Fields(c.limits, c.ds, c.opts)
		prefix := ratelimitheader.Field{Name: "X", Value: "y"}
		got := ratelimitheader.AppendFields([]ratelimitheader.Field{prefix}, c.limits, c.ds, c.opts)
		if len(got) != 1+len(want) || got[0] != prefix || !slices.Equal(got[1:], want) {
			t.Errorf("case %d: AppendFields = %q, want %q after the prefix", i, got, want)
		}
		if len(want) > ratelimitheader.MaxFields {
			t.Errorf("case %d: %d fields, more than MaxFields", i, len(want))
		}
	}
	l, d := []floodgate.Limit{minute}, []floodgate.Decision{{Remaining: 0, RetryAfter: time.Second}}
	var buf [ratelimitheader.MaxFields]ratelimitheader.Field
	if n := testing.AllocsPerRun(100, func() { _ = ratelimitheader.AppendFields(buf[:0], l, d, nil) }); n > 2 {
		t.Errorf("AppendFields into a stack array: %v allocations, want 2 (RateLimit-Policy and RateLimit share a string; Retry-After)", n)
	}
}
