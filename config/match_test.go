package config

import (
	"slices"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

func loadTestdata(t testing.TB) *Config {
	t.Helper()
	c, err := Load("testdata/ratelimit", "testdata/floodgate")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// e builds a descriptor from key, value pairs.
func e(kv ...string) []Entry {
	out := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

func TestMatch(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    string // rule ID; "" for no match
	}{
		{"exact value", "db_ops", e("table", "orders"), "db_ops|table=orders"},
		{"other exact value", "db_ops", e("table", "audit_log"), "db_ops|table=audit_log"},
		{"unlisted value of a valued key", "db_ops", e("table", "users"), ""},
		{"unknown key", "db_ops", e("schema", "orders"), ""},
		{"unknown domain", "nope", e("table", "orders"), ""},
		{"no entries", "db_ops", nil, ""},
		{"key is case-sensitive", "db_ops", e("Table", "orders"), ""},
		{"value is case-sensitive", "db_ops", e("table", "Orders"), ""},

		{"nested, key-only inner", "sms", e("category", "promotional", "recipient", "2065550100"), "sms|category=promotional|recipient"},
		{"top-level key-only", "sms", e("recipient", "2065550100"), "sms|recipient"},
		{"empty value matches key-only", "sms", e("recipient", ""), "sms|recipient"},
		{"placeholder without a limit", "sms", e("category", "promotional"), ""},
		{"nested under an unlisted value", "sms", e("category", "transactional", "recipient", "2065550100"), ""},
		{"deeper than the config", "sms", e("recipient", "1", "x", "y"), ""},

		{"key-only default", "edge_per_client", e("client_ip", "198.51.100.7"), "edge_per_client|client_ip"},
		{"exact value beats key-only", "edge_per_client", e("client_ip", "192.0.2.66"), "edge_per_client|client_ip=192.0.2.66"},

		{"depth 1 of 2", "storefront", e("route", "checkout"), "storefront|route=checkout"},
		{"depth 2 of 2", "storefront", e("route", "checkout", "method", "POST"), "storefront|route=checkout|method"},
		{"depth 3 of 2", "storefront", e("route", "checkout", "method", "POST", "x", "y"), ""},

		{"unlimited", "backoffice", e("caller", "health_checker"), "backoffice|caller=health_checker"},
		{"limited beside unlimited", "backoffice", e("caller", "cron"), "backoffice|caller"},

		{"shadow value", "login", e("app", "web", "account", "load-test"), "login|app|account=load-test"},
		{"shadow sibling", "login", e("app", "web", "account", "bob"), "login|app|account"},

		{"wildcard", "paths", e("path", "/api/orders"), "paths|path=/api/*"},
		{"wildcard matches its bare prefix", "paths", e("path", "/api/"), "paths|path=/api/*"},
		{"longest wildcard wins", "paths", e("path", "/api/search?q=x"), "paths|path=/api/search*"},
		{"exact beats wildcard", "paths", e("path", "/api/health"), "paths|path=/api/health"},
		{"wildcard miss", "paths", e("path", "/static/app.js"), ""},
		{"wildcard is a prefix, not a glob", "paths", e("path", "x/api/orders"), ""},

		{"number as value", "yaml features", e("service", "8080"), "yaml features|service=8080"},
		{"merged key", "yaml features", e("service", "quoted"), "yaml features|service=quoted"},
		{"null rate_limit is no limit", "yaml features", e("placeholder", "x"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Match(tc.domain, tc.entries)
			got := ""
			if r != nil {
				got = r.ID
			}
			if got != tc.want {
				t.Errorf("Match(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
			}
		})
	}
}

// TestMatchNoBacktracking pins upstream's walk: the most specific entry of
// a level is taken even when a less specific one would have led to a rule.
func TestMatchNoBacktracking(t *testing.T) {
	t.Parallel()
	d, err := Parse("nb.yaml", []byte(`
domain: nb
descriptors:
  - key: a
    value: x
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: p
    value: pre*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: p
    descriptors:
      - key: q
        rate_limit: {unit: second, requests_per_unit: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []Entry
		want    string
	}{
		{e("a", "x"), "nb|a=x"},
		{e("a", "y", "b", "1"), "nb|a|b"},
		{e("a", "x", "b", "1"), ""}, // a=x has no children; a (key-only) is not tried
		{e("p", "other", "q", "1"), "nb|p|q"},
		{e("p", "prefix", "q", "1"), ""}, // the wildcard wins the level and has no children
	} {
		got := ""
		if r := d.Match(tc.entries); r != nil {
			got = r.ID
		}
		if got != tc.want {
			t.Errorf("Match(%v) = %q, want %q", tc.entries, got, tc.want)
		}
	}
}

func TestMatchRuleFields(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	if r := c.Match("backoffice", e("caller", "health_checker")); !r.Unlimited || r.Limit.Limit != 0 {
		t.Errorf("health_checker: Unlimited %v, Limit %v; want unlimited", r.Unlimited, r.Limit)
	}
	if r := c.Match("login", e("app", "web", "account", "load-test")); !r.ShadowMode {
		t.Errorf("load-test: ShadowMode false, want true")
	}
	if r := c.Match("login", e("app", "web", "account", "bob")); r.ShadowMode {
		t.Errorf("bob: ShadowMode true, want false")
	}
	if r := c.Match("tenants", e("tenant", "initech")); !r.DetailedMetric {
		t.Errorf("tenant: DetailedMetric false, want true")
	}
	if r := c.Match("edge_per_client", e("client_ip", "192.0.2.66")); r.Limit.Limit != 0 || r.Unlimited {
		t.Errorf("blocked IP: %v unlimited=%v, want a limit of 0", r.Limit, r.Unlimited)
	}
	r := c.Match("payments", e("merchant", "m1"))
	if got, want := r.Limit.String(), `"merchant_rps" 50/1s gcra burst=200`; got != want {
		t.Errorf("merchant limit %s, want %s", got, want)
	}
	if r.FailurePolicy != floodgate.FailOpen {
		t.Errorf("merchant failure mode %q, want %q", r.FailurePolicy, floodgate.FailOpen)
	}
	if r := c.Match("payments", e("refund", "r")); r.FailurePolicy != floodgate.FailLocal {
		t.Errorf("refund failure mode %q, want %q", r.FailurePolicy, floodgate.FailLocal)
	}
	if r := c.Match("payments", e("export", "e")); r.FailurePolicy != "" {
		t.Errorf("export failure mode %q, want the server's default", r.FailurePolicy)
	}
}

func TestMatchAll(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	standard := e("tier", "standard", "user", "alice")
	export := e("endpoint", "export", "user", "alice")
	for _, tc := range []struct {
		name        string
		domain      string
		descriptors [][]Entry
		want        []string // per descriptor: rule ID, "-" none, "ID>replacer ID" replaced
	}{
		{"only the replaced rule", "api_tiers", [][]Entry{standard}, []string{"api_tiers|tier=standard|user=alice"}},
		{"both: the named one is replaced", "api_tiers", [][]Entry{standard, export},
			[]string{"api_tiers|tier=standard|user=alice>api_tiers|endpoint=export|user=alice", "api_tiers|endpoint=export|user=alice"}},
		{"order does not matter", "api_tiers", [][]Entry{export, standard},
			[]string{"api_tiers|endpoint=export|user=alice", "api_tiers|tier=standard|user=alice>api_tiers|endpoint=export|user=alice"}},
		{"no match keeps its place", "api_tiers", [][]Entry{e("x", "y"), export}, []string{"-", "api_tiers|endpoint=export|user=alice"}},
		{"unknown domain", "nope", [][]Entry{standard}, []string{"-"}},
		{"no descriptors", "api_tiers", nil, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.MatchAll(tc.domain, tc.descriptors)
			if len(got) != len(tc.want) {
				t.Fatalf("MatchAll returned %d matches, want %d", len(got), len(tc.want))
			}
			for i, m := range got {
				s := "-"
				if m.Rule != nil {
					s = m.Rule.ID
				}
				if m.ReplacedBy != nil {
					s += ">" + m.ReplacedBy.ID
				}
				if s != tc.want[i] {
					t.Errorf("match %d = %s, want %s", i, s, tc.want[i])
				}
				if limited := m.Rule != nil && m.ReplacedBy == nil; m.Limited() != limited {
					t.Errorf("match %d: Limited() = %v, want %v", i, m.Limited(), limited)
				}
			}
		})
	}
}

// TestMatchAllReplacedStillReplaces pins that a replaced rule's own replaces
// still apply, as upstream collects every replaces before dropping any.
func TestMatchAllReplacedStillReplaces(t *testing.T) {
	t.Parallel()
	d, err := Parse("chain.yaml", []byte(`
domain: chain
descriptors:
  - key: a
    rate_limit: {name: A, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit: {name: B, unit: second, requests_per_unit: 1, replaces: [{name: A}]}
  - key: c
    rate_limit: {unlimited: true, replaces: [{name: B}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	got := c.MatchAll("chain", [][]Entry{e("a", "1"), e("b", "1"), e("c", "1")})
	if got[0].ReplacedBy == nil || got[0].ReplacedBy.Limit.Name != "B" {
		t.Errorf("A replaced by %v, want B", got[0].ReplacedBy)
	}
	if got[1].ReplacedBy == nil || got[1].ReplacedBy.ID != "chain|c" {
		t.Errorf("B replaced by %v, want the unlimited rule c", got[1].ReplacedBy)
	}
	if got[2].ReplacedBy != nil || got[2].Limited() {
		t.Errorf("c: ReplacedBy %v, Limited %v; want not replaced and not limited (unlimited)", got[2].ReplacedBy, got[2].Limited())
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	c := loadTestdata(t)
	for _, tc := range []struct {
		domain  string
		entries []Entry
	}{
		{"sms", e("category", "promotional", "recipient", "2065550100")},
		{"paths", e("path", "/api/search?q=x")},
		{"edge_per_client", e("client_ip", "192.0.2.66")},
		{"sms", e("nothing", "here")},
	} {
		if n := testing.AllocsPerRun(100, func() { c.Match(tc.domain, tc.entries) }); n != 0 {
			t.Errorf("Match(%q, %v) allocates %v times, want 0", tc.domain, tc.entries, n)
		}
	}
}

// TestAppendMatchAll: AppendMatchAll appends what MatchAll returns after
// what dst held, applies replaces among the appended matches only (a
// replacing rule already in dst replaces nothing), and with room in dst
// allocates nothing.
func TestAppendMatchAll(t *testing.T) {
	c := loadTestdata(t)
	standard := e("tier", "standard", "user", "alice")
	export := e("endpoint", "export", "user", "alice")
	for _, ds := range [][][]Entry{{standard}, {export}, {standard, export}, {export, standard}, {e("x", "y"), export}, nil} {
		want := c.MatchAll("api_tiers", ds)
		// An earlier request's match of the rule export replaces: this
		// request's export must not mark it.
		prefix := c.MatchAll("api_tiers", [][]Entry{standard})
		got := c.AppendMatchAll(prefix, "api_tiers", ds)
		if len(got) != 1+len(want) || got[0] != (Match{Rule: prefix[0].Rule}) || !slices.Equal(got[1:], want) {
			t.Errorf("AppendMatchAll(%v) = %v, want %v after the prefix", ds, got, want)
		}
		if got := c.Domain("api_tiers").AppendMatchAll(nil, ds); !slices.Equal(got, want) {
			t.Errorf("Domain.AppendMatchAll(%v) = %v, want %v", ds, got, want)
		}
	}
	if got := c.AppendMatchAll(nil, "nope", [][]Entry{standard}); len(got) != 1 || got[0] != (Match{}) {
		t.Errorf("unknown domain: %v, want one empty match", got)
	}
	var buf [4]Match
	ds := [][]Entry{standard, export}
	if n := testing.AllocsPerRun(100, func() { c.AppendMatchAll(buf[:0], "api_tiers", ds) }); n != 0 {
		t.Errorf("AppendMatchAll into a stack array allocates %v times, want 0", n)
	}
}
