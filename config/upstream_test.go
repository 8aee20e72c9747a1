package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// upstreamValidKeys is validKeys of envoyproxy/ratelimit's
// src/config/config_impl.go (commit f2fb157, 2026): every field name its
// loader accepts. When upstream adds one, add it here: the tests below then
// fail until Floodgate reads it and testdata/upstream/valid/every_field.yaml
// uses it.
var upstreamValidKeys = []string{
	"domain",
	"key",
	"value",
	"descriptors",
	"rate_limit",
	"unit",
	"requests_per_unit",
	"unlimited",
	"shadow_mode",
	"quota_mode",
	"name",
	"replaces",
	"detailed_metric",
	"value_to_metric",
	"share_threshold",
	"metadata",
}

// TestUpstreamFieldNames checks that Floodgate reads every field name
// upstream's loader accepts, and that the fixture every_field.yaml, which
// loads, uses each of them.
func TestUpstreamFieldNames(t *testing.T) {
	t.Parallel()
	known := slices.Concat(rootFields, descriptorFields, rateLimitFields, replacesFields)
	for _, k := range upstreamValidKeys {
		if !slices.Contains(known, k) {
			t.Errorf("upstream's field %q is not read by Parse", k)
		}
	}
	const file = "testdata/upstream/valid/every_field.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	used := make(map[string]bool)
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				used[n.Content[i].Value] = true
				if n.Content[i].Value == "metadata" {
					continue // its names are the user's
				}
				walk(n.Content[i+1])
			}
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	for _, k := range upstreamValidKeys {
		if !used[k] {
			t.Errorf("%s does not use upstream's field %q", file, k)
		}
	}
	d, err := Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	// Each field has its effect.
	r := c.Match("every_field", []Entry{{"client", "batch-7"}, {"op", "export"}})
	if r == nil {
		t.Fatal("no rule for client=batch-7, op=export")
	}
	if !r.ShadowMode || !r.QuotaMode || !r.DetailedMetric || r.Limit.Name != "batch_ops" ||
		r.Limit.Limit != 500 || r.Limit.Period != time.Hour || !reflect.DeepEqual(r.Metadata, map[string]any{"owner": "batch-team"}) {
		t.Errorf("rule %s: %+v", r.ID, r)
	}
	if lv := r.Path[0]; !lv.ShareThreshold || !lv.ValueToMetric || lv.Value != "batch*" {
		t.Errorf("level 0: %+v", lv)
	}
	u := c.Match("every_field", []Entry{{"client", "internal"}})
	if u == nil || !u.Unlimited || !slices.Equal(u.Replaces, []string{"batch_ops"}) {
		t.Errorf("client=internal: %+v", u)
	}
}

// TestUpstreamInvalid loads one file for each error upstream's loader
// reports (its test/config files, and the yaml.v2 type errors of its
// structs), each refused here too, at its line and field.
func TestUpstreamInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file  string
		line  int
		field string
		msg   string
	}{
		{"bad_yaml.yaml", 2, "", "found unexpected end of stream"},
		{"non_string_key.yaml", 5, "descriptors[0].0.25", `unknown field "0.25"`},
		{"misspelled_key.yaml", 6, "descriptors[0].ratelimit", `did you mean "rate_limit"?`},
		{"misspelled_key2.yaml", 7, "descriptors[0].rate_limit.requests_per_unit", "missing requests_per_unit"},
		{"non_map_list.yaml", 4, "descriptors[0]", `want a descriptor (a mapping with key`},
		{"float_value.yaml", 7, "descriptors[0].rate_limit.requests_per_unit", `want an integer, not "2.5"`},
		{"empty_domain.yaml", 2, "domain", "missing domain"},
		{"empty_key.yaml", 4, "descriptors[0].key", "missing key"},
		{"duplicate_key.yaml", 7, "descriptors[1].key", `duplicate descriptor: key "account" with value "savings"`},
		{"unlimited_with_unit.yaml", 7, "descriptors[0].rate_limit.unit", "an unlimited rate limit takes no unit"},
		{"bad_limit_unit.yaml", 7, "descriptors[0].rate_limit.unit", `unknown unit "fortnight"`},
		{"missing_unit.yaml", 6, "descriptors[0].rate_limit.unit", "missing unit"},
		{"replaces_empty.yaml", 11, "descriptors[0].descriptors[0].rate_limit.replaces[0].name", "empty name"},
		{"replaces_self.yaml", 11, "descriptors[0].descriptors[0].rate_limit.replaces[0].name", "cannot replace itself"},
		{"share_threshold_without_wildcard.yaml", 6, "descriptors[0].share_threshold", "share_threshold needs a wildcard value"},
		{"negative_requests.yaml", 7, "descriptors[0].rate_limit.requests_per_unit", "-1 is negative"},
		{"text_requests.yaml", 7, "descriptors[0].rate_limit.requests_per_unit", `want an integer, not "many"`},
		{"metadata_list.yaml", 9, "descriptors[0].metadata", "want a mapping of names to values, not a list"},
		{"descriptors_not_list.yaml", 3, "descriptors", "want a list of descriptors"},
		{"bool_not_bool.yaml", 5, "descriptors[0].quota_mode", `want true or false, not "always"`},
	}
	files, err := filepath.Glob("testdata/upstream/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d files in testdata/upstream/invalid, %d cases: give each file a case", len(files), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata/upstream/invalid", tc.file)
			err := Validate(path)
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("no error, want %d: %s: %s", tc.line, tc.field, tc.msg)
			}
			e := errs[0]
			if e.File != path || e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Problem, tc.msg) {
				t.Errorf("got %v\nwant %s:%d: %s: …%s…", e, path, tc.line, tc.field, tc.msg)
			}
		})
	}
}

// TestUpstreamShapes loads the shapes of upstream's example and test
// configs (testdata/upstream/valid) together and checks what they define.
func TestUpstreamShapes(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/upstream/valid")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		id       string
		limit    int64
		period   time.Duration
		quota    bool
		shadow   bool
		metadata map[string]any
	}
	tests := []struct {
		domain  string
		entries []Entry
		want    *want
	}{
		{"storefront_example", []Entry{{"plan", "basic"}}, &want{id: "storefront_example|plan=basic", limit: 1, period: time.Minute, quota: true,
			metadata: map[string]any{"plan_with_quota": map[string]any{"name": "basic"}}}},
		{"storefront_example", []Entry{{"plan", "premium"}}, &want{id: "storefront_example|plan=premium", limit: 2, period: time.Minute, quota: true,
			metadata: map[string]any{"plan_with_quota": map[string]any{"name": "premium"}}}},
		{"storefront_example", []Entry{{"plan", "free"}}, nil},
		{"storefront_example", []Entry{{"customer", "c1"}, {"cart", "trial"}}, &want{id: "storefront_example|customer|cart=trial", limit: 6, period: time.Minute, shadow: true}},
		{"storefront_example", []Entry{{"customer", "c1"}, {"order", "blocked"}}, &want{id: "storefront_example|customer|order=blocked", limit: 0, period: time.Minute}},
		{"storefront_example", []Entry{{"customer", "c1"}, {"cart", "x"}}, &want{id: "storefront_example|customer|cart", limit: 2, period: time.Second}},
		{"billing_metadata", []Entry{{"account", "gold"}, {"invoice", "i1"}}, &want{id: "billing_metadata|account=gold|invoice", limit: 5, period: time.Second,
			metadata: map[string]any{"name": "invoices_gold"}}},
		{"billing_metadata", []Entry{{"account", "gold"}, {"invoice", "monthly"}}, &want{id: "billing_metadata|account=gold|invoice=monthly", limit: 10, period: time.Second}},
		{"billing_metadata", []Entry{{"account", "silver"}}, &want{id: "billing_metadata|account", limit: 20, period: time.Minute,
			metadata: map[string]any{"account_quota": map[string]any{"name": "any_account"}}}},
		// account=gold has no rate_limit of its own: no match, as upstream.
		{"billing_metadata", []Entry{{"account", "gold"}}, nil},
	}
	for _, tc := range tests {
		r := c.Match(tc.domain, tc.entries)
		switch {
		case tc.want == nil && r != nil:
			t.Errorf("%s %v: matched %s, want none", tc.domain, tc.entries, r.ID)
		case tc.want == nil:
		case r == nil:
			t.Errorf("%s %v: no match, want %s", tc.domain, tc.entries, tc.want.id)
		default:
			got := want{id: r.ID, limit: r.Limit.Limit, period: r.Limit.Period, quota: r.QuotaMode, shadow: r.ShadowMode, metadata: r.Metadata}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Errorf("%s %v:\n got %+v\nwant %+v", tc.domain, tc.entries, got, *tc.want)
			}
		}
	}
	// replaces across descriptors, as upstream's example: partner replaces
	// per_customer and partner_default.
	ms := c.MatchAll("storefront_example", [][]Entry{{{"tier", "partner"}}, {{"customer", "c1"}, {"order", "acme"}}, {{"gateway", "edge"}, {"backend", "partner"}}})
	if ms[0].ReplacedBy != nil || ms[1].ReplacedBy != ms[0].Rule || ms[2].ReplacedBy != ms[0].Rule {
		t.Errorf("replaces: %+v", ms)
	}
}

// TestWildcards matches values against upstream's wildcard shapes: at the
// end, in the middle, several, nested; and the most specific wins.
func TestWildcards(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/upstream/valid")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain  string
		entries []Entry
		want    string // the rule's ID, or "" for none
	}{
		{"media_wildcards", []Entry{{"asset", "img"}}, "media_wildcards|asset=img*"},
		{"media_wildcards", []Entry{{"asset", "img/cat.png"}}, "media_wildcards|asset=img*"},
		{"media_wildcards", []Entry{{"asset", "im"}}, ""},
		{"media_wildcards", []Entry{{"exact", "img"}}, "media_wildcards|exact=img"},
		{"media_wildcards", []Entry{{"exact", "img2"}}, ""},
		{"media_wildcards", []Entry{{"anyvalue", "whatever"}}, "media_wildcards|anyvalue"},
		{"media_wildcards", []Entry{{"middle", "vz"}}, "media_wildcards|middle=v*z"},
		{"media_wildcards", []Entry{{"middle", "v-anything-z"}}, "media_wildcards|middle=v*z"},
		{"media_wildcards", []Entry{{"middle", "v-anything"}}, ""},
		{"media_wildcards", []Entry{{"middle", "z"}}, ""},
		{"media_wildcards", []Entry{{"middle", "v"}}, ""},
		{"media_wildcards", []Entry{{"middle", "v*z"}}, "media_wildcards|middle=v*z"},
		{"media_wildcards", []Entry{{"several", "img1x2png"}}, "media_wildcards|several=img*x*png"},
		{"media_wildcards", []Entry{{"several", "imgxpng"}}, "media_wildcards|several=img*x*png"},
		{"media_wildcards", []Entry{{"several", "imgpng"}}, ""},
		{"media_wildcards", []Entry{{"several", "img1x2jpg"}}, ""},
		{"media_wildcards", []Entry{{"several", "img12png"}}, ""},
		{"media_wildcards", []Entry{{"region", "north"}, {"asset", "vid1"}}, "media_wildcards|region=north|asset=vid*"},
		{"media_wildcards", []Entry{{"region", "north"}, {"asset", "img1"}}, ""},
		{"shared_buckets", []Entry{{"doc", "draft1"}}, "shared_buckets|doc=draft1"},
		{"shared_buckets", []Entry{{"doc", "draft2"}}, "shared_buckets|doc=draft*"},
		{"shared_buckets", []Entry{{"route", "/v2/items"}}, "shared_buckets|route=/v*/items"},
		{"shared_buckets", []Entry{{"rpc", "pkg.UserService.Get"}}, "shared_buckets|rpc=pkg*Service*Get"},
		{"shared_buckets", []Entry{{"rpc", "pkg.User.Get"}}, ""},
	}
	for _, tc := range tests {
		got := ""
		if r := c.Match(tc.domain, tc.entries); r != nil {
			got = r.ID
		}
		if got != tc.want {
			t.Errorf("%s %v: got %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
	}
	// share_threshold: every value matching a middle wildcard shares one
	// counter; without it each value has its own.
	shared := c.Match("shared_buckets", []Entry{{"route", "/v2/items"}})
	if a, b := shared.Key([]Entry{{"route", "/v2/items"}}), shared.Key([]Entry{{"route", "/v3/items"}}); a != b {
		t.Errorf("shared keys differ: %q, %q", a, b)
	}
	own := c.Match("media_wildcards", []Entry{{"middle", "vaz"}})
	if a, b := own.Key([]Entry{{"middle", "vaz"}}), own.Key([]Entry{{"middle", "vbz"}}); a == b {
		t.Errorf("unshared keys are one: %q", a)
	}
}

// TestWildcardSpecificity: among the wildcards that match, the one with the
// most text besides "*" wins, whatever the file order; among equals, a
// value with its only "*" at the end, then the first in the file.
func TestWildcardSpecificity(t *testing.T) {
	t.Parallel()
	const src = `
domain: w
descriptors:
  - {key: p, value: "a*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: p, value: "a*c", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: p, value: "ab*c", rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: p, value: "x*yz", rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: p, value: "*xyz", rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: p, value: "xy*", rate_limit: {unit: second, requests_per_unit: 6}}
  - {key: p, rate_limit: {unit: second, requests_per_unit: 7}}
`
	d, err := Parse("w.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]int64{
		"a":     1,
		"abd":   1,
		"azc":   2,
		"abzc":  3,
		"xyz":   4, // x*yz and *xyz have 3 bytes besides "*": the first in the file
		"xyq":   6,
		"xyzz":  6,
		"q":     7,
		"qxyz":  5,
		"xqyz":  4,
		"abc":   3,
		"a*c":   2,
		"zzzzz": 7,
	} {
		r := d.Match([]Entry{{"p", value}})
		if r == nil || r.Limit.Limit != want {
			t.Errorf("p=%s: got %v, want the rule of limit %d", value, r, want)
		}
	}
}

// TestMergeDomains merges a domain's files under Loader.MergeDomains, as
// upstream's MERGE_DOMAIN_CONFIG, and refuses the split without it.
func TestMergeDomains(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/upstream/merge")
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Field != "domain" || !strings.Contains(errs[0].Problem, `domain "shop" is already defined`) ||
		!strings.Contains(errs[0].Problem, "-merge-domain-config") {
		t.Errorf("without merging: %v", err)
	}
	merging := Loader{MergeDomains: true}
	c, err := merging.Load("testdata/upstream/merge")
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("shop")
	var ids []string
	for _, r := range d.Rules() {
		ids = append(ids, r.ID+"@"+filepath.Base(r.File))
	}
	if want := []string{"shop|route=orders@orders.yaml", "shop|route=payments@payments.yaml"}; !slices.Equal(ids, want) {
		t.Errorf("rules %v, want %v", ids, want)
	}
	// A replaces of one file names a rate_limit of the other.
	ms := c.MatchAll("shop", [][]Entry{{{"route", "orders"}}, {{"route", "payments"}}})
	if ms[0].Rule == nil || ms[0].ReplacedBy != ms[1].Rule || ms[1].Rule == nil {
		t.Errorf("replaces across merged files: %+v", ms)
	}
	if err := merging.Validate("testdata/upstream/merge"); err != nil {
		t.Errorf("Validate: %v", err)
	}

	_, err = merging.Load("testdata/upstream/merge_dup")
	errs = Errors(err)
	if len(errs) != 1 {
		t.Fatalf("duplicate top-level descriptor: %v", err)
	}
	e := errs[0]
	if e.File != "testdata/upstream/merge_dup/second.yaml" || e.Line != 8 || e.Column != 5 || e.Field != "descriptors[1].key" ||
		!strings.Contains(e.Problem, `key "route" with value "orders" is already a top-level descriptor of domain "shop" (testdata/upstream/merge_dup/first.yaml:3)`) {
		t.Errorf("duplicate: %v", e)
	}
}

// TestMergeDomainsApart: merging leaves the domains merged unchanged, lets
// nested descriptors of two files share keys, and still refuses a replaces
// that names no rate_limit of any file of the domain, at its line.
func TestMergeDomainsApart(t *testing.T) {
	t.Parallel()
	a, err := Parse("a.yaml", []byte(`
domain: d
descriptors:
  - key: tenant
    value: a
    descriptors:
      - {key: user, rate_limit: {unit: second, requests_per_unit: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte(`
domain: d
descriptors:
  - key: tenant
    value: b
    descriptors:
      - {key: user, rate_limit: {unit: second, requests_per_unit: 2}}
`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Loader{MergeDomains: true}.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]int64{"a": 1, "b": 2} {
		if r := c.Match("d", []Entry{{"tenant", tenant}, {"user", "u"}}); r == nil || r.Limit.Limit != want {
			t.Errorf("tenant %s: %v", tenant, r)
		}
	}
	alone, err := New(a)
	if err != nil {
		t.Fatal(err)
	}
	if r := alone.Match("d", []Entry{{"tenant", "b"}, {"user", "u"}}); r != nil || len(a.Rules()) != 1 {
		t.Errorf("merging changed domain a: %v, %d rules", r, len(a.Rules()))
	}

	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: d\ndescriptors:\n  - {key: x, rate_limit: {name: nx, unit: second, requests_per_unit: 1}}\n")
	write("b.yaml", "domain: d\ndescriptors:\n  - key: y\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: typo}]\n")
	_, err = Loader{MergeDomains: true}.Load(dir)
	errs := Errors(err)
	if len(errs) != 1 || errs[0].File != filepath.Join(dir, "b.yaml") || errs[0].Line != 7 || errs[0].Field != "descriptors[0].rate_limit.replaces[0].name" ||
		!strings.Contains(errs[0].Problem, `replaces "typo", but no rate_limit of domain "d" has that name`) {
		t.Errorf("replaces naming nothing: %v", err)
	}
	// Beside a file that does not parse, the replaces naming nothing of
	// the others are still reported.
	write("c.yaml", "domain: e\ndescriptors: [")
	write("b.yaml", "domain: f\ndescriptors:\n  - key: y\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: typo}]\n")
	_, err = Load(dir)
	if errs := Errors(err); len(errs) != 2 || !strings.Contains(err.Error(), `replaces "typo"`) {
		t.Errorf("all problems at once: %v", err)
	}
}

// TestMetadata reads metadata as upstream's yaml.v2 reads it into a
// Struct, and refuses what a Struct cannot hold, at its line.
func TestMetadata(t *testing.T) {
	t.Parallel()
	const src = `
domain: m
descriptors:
  - key: k
    quota_mode: yes
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
      <<: &base {team: core, tags: [a, b]}
      name: "service_1"
      count: 3
      hex: 0x10
      huge: 123456789012345678901234567890
      ratio: 0.5
      on: on
      quoted: "on"
      none: ~
      when: 2026-12-01
      addr: 10.0.0.1
      nested: {list: [1, {x: y}], empty: {}, again: *base}
  - key: empty
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {}
  - key: nil_metadata
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
`
	d, err := Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	rules := d.Rules()
	want := map[string]any{
		"team": "core", "tags": []any{"a", "b"},
		"name": "service_1", "count": int64(3), "hex": int64(16), "ratio": 0.5, "huge": 1.2345678901234568e+29,
		"on": true, "quoted": "on", "none": nil, "when": "2026-12-01", "addr": "10.0.0.1",
		// y is YAML 1.1's true, as upstream's yaml.v2 reads it.
		"nested": map[string]any{"list": []any{int64(1), map[string]any{"x": true}}, "empty": map[string]any{},
			"again": map[string]any{"team": "core", "tags": []any{"a", "b"}}},
	}
	if !reflect.DeepEqual(rules[0].Metadata, want) {
		t.Errorf("metadata:\n got %#v\nwant %#v", rules[0].Metadata, want)
	}
	if !rules[0].QuotaMode {
		t.Error("quota_mode: yes is not read as true")
	}
	if rules[1].Metadata != nil || rules[2].Metadata != nil || rules[1].QuotaMode {
		t.Errorf("empty and null metadata: %v, %v", rules[1].Metadata, rules[2].Metadata)
	}

	for _, tc := range []struct{ src, field, msg string }{
		{"metadata: 5", "descriptors[0].metadata", `want a mapping of names to values, not "5"`},
		{"metadata: {ratio: .nan}", "descriptors[0].metadata.ratio", "not a finite number"},
		{"metadata: {deep: {big: -.inf}}", "descriptors[0].metadata.deep.big", "not a finite number"},
		{"metadata: {a: 1, a: 2}", "descriptors[0].metadata.a", "given twice"},
		{"metadata: {[x]: 1}", "descriptors[0].metadata", "a key must be a string"},
		{"metadata: {n: 010}", "descriptors[0].metadata.n", "leading zero"},
	} {
		src := "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    " + tc.src + "\n"
		_, err := Parse("m.yaml", []byte(src))
		errs := Errors(err)
		if len(errs) != 1 || errs[0].Line != 5 || errs[0].Field != tc.field || !strings.Contains(errs[0].Problem, tc.msg) {
			t.Errorf("%s: got %v, want line 5: %s: …%s…", tc.src, err, tc.field, tc.msg)
		}
	}
	var deep strings.Builder
	for range maxDepth + 2 {
		deep.WriteString("{a: ")
	}
	deep.WriteString("1")
	for range maxDepth + 2 {
		deep.WriteString("}")
	}
	src3 := "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: " + deep.String() + "\n"
	if _, err := Parse("m.yaml", []byte(src3)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("nested deeper than %d levels", maxDepth)) {
		t.Errorf("deep metadata: %v", err)
	}
}

// TestQuotaModeOnRateLimit: quota_mode belongs to the descriptor, as
// upstream reads it; inside rate_limit it is an error saying so.
func TestQuotaModeOnRateLimit(t *testing.T) {
	t.Parallel()
	_, err := Parse("q.yaml", []byte("domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, quota_mode: true}\n"))
	errs := Errors(err)
	if len(errs) != 1 || errs[0].Field != "descriptors[0].rate_limit.quota_mode" || !strings.Contains(errs[0].Problem, "it belongs in the descriptor") {
		t.Errorf("got %v", err)
	}
}

// TestMergeWhileMatching: merging reads the domains it merges and never
// writes to them, so a domain in use can be merged again (the race
// detector checks it).
func TestMergeWhileMatching(t *testing.T) {
	t.Parallel()
	a, err := Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - {key: p, value: \"v*z\", rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: p, value: \"a*\", rate_limit: {unit: second, requests_per_unit: 2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte("domain: d\ndescriptors:\n  - {key: q, value: \"x*y\", rate_limit: {unit: second, requests_per_unit: 3}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if r := a.Match([]Entry{{"p", "vaz"}}); r == nil || r.Limit.Limit != 1 {
					t.Errorf("match %v", r)
					return
				}
			}
		})
	}
	for range 50 {
		c, err := Loader{MergeDomains: true}.New(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if r := c.Match("d", []Entry{{"q", "x1y"}}); r == nil || r.Limit.Limit != 3 {
			t.Fatalf("merged match %v", r)
		}
	}
	close(done)
	wg.Wait()
}
