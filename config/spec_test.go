package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The YAML a user would write for a Spec, marshalled by go-yaml from
// structs of its own (not by FromSpec's builder), so that the two paths
// share nothing but the parser.
type (
	yamlRoot struct {
		Domain      string     `yaml:"domain"`
		Descriptors []yamlDesc `yaml:"descriptors,omitempty"`
	}
	yamlDesc struct {
		Key            string         `yaml:"key"`
		Value          string         `yaml:"value,omitempty"`
		RateLimit      *yamlRate      `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDesc     `yaml:"descriptors,omitempty"`
		ShadowMode     bool           `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool           `yaml:"detailed_metric,omitempty"`
		QuotaMode      bool           `yaml:"quota_mode,omitempty"`
		Metadata       map[string]any `yaml:"metadata,omitempty"`
	}
	yamlRate struct {
		Unit            string     `yaml:"unit,omitempty"`
		RequestsPerUnit uint32     `yaml:"requests_per_unit"`
		Unlimited       bool       `yaml:"unlimited,omitempty"`
		Name            string     `yaml:"name,omitempty"`
		Replaces        []yamlRepl `yaml:"replaces,omitempty"`
	}
	yamlRepl struct {
		Name string `yaml:"name"`
	}
)

func toYAML(s Spec) []byte {
	var descs func([]DescriptorSpec) []yamlDesc
	descs = func(ds []DescriptorSpec) []yamlDesc {
		var out []yamlDesc
		for _, d := range ds {
			y := yamlDesc{Key: d.Key, Value: d.Value, Descriptors: descs(d.Descriptors),
				ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric, QuotaMode: d.QuotaMode, Metadata: d.Metadata}
			if r := d.RateLimit; r != nil {
				y.RateLimit = &yamlRate{Unit: r.Unit, RequestsPerUnit: r.RequestsPerUnit, Unlimited: r.Unlimited, Name: r.Name}
				for _, n := range r.Replaces {
					y.RateLimit.Replaces = append(y.RateLimit.Replaces, yamlRepl{n})
				}
			}
			out = append(out, y)
		}
		return out
	}
	data, err := yaml.Marshal(yamlRoot{Domain: s.Domain, Descriptors: descs(s.Descriptors)})
	if err != nil {
		panic(err)
	}
	return data
}

// ruleView is what a rule decides by, numbers in metadata as float64 (a
// Spec holds a structpb's floats, YAML has integers too).
func ruleView(r *Rule) string {
	var norm func(any) any
	norm = func(v any) any {
		switch x := v.(type) {
		case int64:
			return float64(x)
		case map[string]any:
			m := make(map[string]any, len(x))
			for k, v := range x {
				m[k] = norm(v)
			}
			return m
		case []any:
			l := make([]any, len(x))
			for i, v := range x {
				l[i] = norm(v)
			}
			return l
		}
		return v
	}
	return fmt.Sprintf("%s %s %v %+v unlimited=%t shadow=%t detailed=%t quota=%t replaces=%q policy=%q metadata=%v",
		r.ID, r.Domain, r.Path, r.Limit, r.Unlimited, r.ShadowMode, r.DetailedMetric, r.QuotaMode, r.Replaces, r.FailurePolicy, norm(map[string]any(r.Metadata)))
}

// problems returns the field and problem of each *Error in err, sorted.
func problems(err error) []string {
	var out []string
	for _, e := range Errors(err) {
		out = append(out, e.Field+": "+e.Problem)
	}
	slices.Sort(out)
	return out
}

// checkSpec asserts that FromSpec reads s as Parse reads its YAML: the
// same rules, or the same problems (fields and messages; a Spec has no
// lines).
func checkSpec(t *testing.T, s Spec) (*Domain, error) {
	t.Helper()
	src := toYAML(s)
	want, wantErr := Parse("spec.yaml", src)
	got, err := FromSpec("spec", s)
	if g, w := problems(err), problems(wantErr); !slices.Equal(g, w) {
		t.Fatalf("FromSpec problems:\n%s\nParse problems:\n%s\nYAML:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"), src)
	}
	for _, e := range Errors(err) {
		if e.File != "spec" || e.Line != 0 || e.Column != 0 {
			t.Errorf("problem %v: want file spec and no line", e)
		}
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("FromSpec error %v, Parse error %v", err, wantErr)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("error does not wrap ErrInvalid: %v", err)
		}
		return nil, err
	}
	if got.Name != want.Name || len(got.Rules()) != len(want.Rules()) {
		t.Fatalf("FromSpec: domain %q, %d rules; Parse: %q, %d rules", got.Name, len(got.Rules()), want.Name, len(want.Rules()))
	}
	for i, r := range got.Rules() {
		if g, w := ruleView(r), ruleView(want.Rules()[i]); g != w {
			t.Errorf("rule %d:\n got %s\nwant %s", i, g, w)
		}
		if r.File != "spec" {
			t.Errorf("rule %d: File %q, want spec", i, r.File)
		}
	}
	return got, nil
}

func TestFromSpecMatchesParse(t *testing.T) {
	t.Parallel()
	rl := func(unit string, n uint32) *RateLimitSpec { return &RateLimitSpec{Unit: unit, RequestsPerUnit: n} }
	deep := DescriptorSpec{Key: "k", RateLimit: rl("second", 1)}
	for range 70 {
		deep = DescriptorSpec{Key: "k", Descriptors: []DescriptorSpec{deep}}
	}
	for _, c := range []struct {
		name string
		spec Spec
		// wantErr: the problems FromSpec must report, each a part of one
		// "field: problem" (the messages themselves are Parse's).
		wantErr []string
	}{
		{name: "empty domain", spec: Spec{}, wantErr: []string{"domain: empty domain"}},
		{name: "no descriptors", spec: Spec{Domain: "d"}},
		{name: "rules", spec: Spec{Domain: "sms", Descriptors: []DescriptorSpec{
			{Key: "category", Value: "promotional", Descriptors: []DescriptorSpec{
				{Key: "recipient", RateLimit: rl("day", 3), ShadowMode: true},
			}},
			{Key: "recipient", RateLimit: &RateLimitSpec{Unit: "day", RequestsPerUnit: 50, Name: "per_recipient"}, DetailedMetric: true},
			{Key: "path", Value: "/api/*", RateLimit: &RateLimitSpec{Unlimited: true, Name: "open", Replaces: []string{"per_recipient"}}, QuotaMode: true},
			{Key: "true", Value: "1", RateLimit: rl("year", 0), Metadata: map[string]any{
				"s": "yes", "n": 1.5, "i": float64(7), "b": true, "nil": nil, "l": []any{"a", 2.0, map[string]any{"x": "y"}},
			}},
		}}},
		{name: "bad rate limits", spec: Spec{Domain: "d", Descriptors: []DescriptorSpec{
			{Key: "a", RateLimit: rl("", 10)},
			{Key: "b", RateLimit: rl("fortnight", 10)},
			{Key: "c", RateLimit: &RateLimitSpec{Unit: "minute", Unlimited: true}},
			{Key: "d", RateLimit: &RateLimitSpec{Unit: "minute", RequestsPerUnit: 1, Name: "x", Replaces: []string{"x", "", "nothing"}}},
		}}, wantErr: []string{
			"descriptors[0].rate_limit.unit: missing unit",
			`descriptors[1].rate_limit.unit: unknown unit "fortnight"`,
			"descriptors[2].rate_limit.unit: an unlimited rate limit takes no unit",
			`descriptors[3].rate_limit.replaces[0].name: a rate limit cannot replace itself ("x")`,
			"descriptors[3].rate_limit.replaces[1].name: empty name",
			`descriptors[3].rate_limit.replaces[2].name: replaces "nothing", but no rate_limit of domain "d" has that name`,
		}},
		{name: "bad descriptors", spec: Spec{Domain: "d", Descriptors: []DescriptorSpec{
			{Key: ""},
			{Key: "k", Value: "v"},
			{Key: "k", Value: "v", Metadata: map[string]any{"nested": []any{map[string]any{"deep": float64(1)}}}},
		}}, wantErr: []string{
			"descriptors[0].key: empty key",
			`descriptors[2].key: duplicate descriptor: key "k" with value "v" is already at this level`,
		}},
		{name: "too deep", spec: Spec{Domain: "d", Descriptors: []DescriptorSpec{deep}}, wantErr: []string{"descriptors nested deeper than 64 levels"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := checkSpec(t, c.spec)
			got := problems(err)
			if len(got) != len(c.wantErr) {
				t.Fatalf("problems:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(c.wantErr), c.wantErr)
			}
			for _, w := range c.wantErr {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
					t.Errorf("no problem %q in\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// TestFromSpecMetadata: what YAML cannot say, FromSpec refuses by field:
// a value of no JSON type, a NaN (which a structpb can carry).
func TestFromSpecMetadata(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		meta map[string]any
		want string
	}{
		{"type", map[string]any{"a": map[string]any{"ch": make(chan int)}}, "descriptors[0].metadata.a.ch: metadata holds a chan int, which is not a JSON value"},
		{"nan", map[string]any{"a": []any{0.0, nanValue()}}, "descriptors[0].metadata.a[1]: NaN is not a finite number"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromSpec("spec", Spec{Domain: "d", Descriptors: []DescriptorSpec{{Key: "k", Metadata: c.meta}}})
			if got := problems(err); len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
				t.Errorf("problems %q, want one starting %q", got, c.want)
			}
			if got, want := fmt.Sprint(err), "spec: "+c.want; !strings.HasPrefix(got, want) {
				t.Errorf("error %q, want it to start %q", got, want)
			}
		})
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}

// A Spec's domain goes into a Config as a parsed one does: the same rules
// for domains given twice.
func TestFromSpecNew(t *testing.T) {
	t.Parallel()
	spec := func(key string) Spec {
		return Spec{Domain: "d", Descriptors: []DescriptorSpec{{Key: key, RateLimit: &RateLimitSpec{Unit: "second", RequestsPerUnit: 1}}}}
	}
	a, err := FromSpec("a", spec("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromSpec("b", spec("y"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(a, b); err == nil || !strings.Contains(err.Error(), `domain "d" is already defined in a;`) {
		t.Errorf("New: %v, want domain already defined", err)
	}
	c, err := Loader{MergeDomains: true}.New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.Domain("d").Rules()); got != 2 {
		t.Errorf("merged: %d rules, want 2", got)
	}
	if !reflect.DeepEqual(c.Domain("d").Rules()[0].Path, []Level{{Key: "x"}}) {
		t.Errorf("rule 0 path %v", c.Domain("d").Rules()[0].Path)
	}
}
