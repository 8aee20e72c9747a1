package config

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
)

// FuzzParse feeds Parse arbitrary bytes. Its seed corpus is every config of
// testdata plus testdata/fuzz/FuzzParse (the same configs and hostile YAML:
// alias bombs, self-references, deep nesting, merge loops). Parse must
// never panic; an error must be made of positioned *Error only; a domain it
// returns must be usable as is.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/ratelimit", "testdata/floodgate", "testdata/invalid", "testdata/upstream/valid", "testdata/upstream/invalid", "testdata/upstream/merge"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("fuzz.yaml", data)
		if err != nil {
			if d != nil {
				t.Fatal("Parse returned a domain and an error")
			}
			errs := Errors(err)
			if len(errs) == 0 {
				t.Fatalf("error without *Error: %v", err)
			}
			for _, e := range errs {
				if e.File != "fuzz.yaml" || e.Line < 0 || e.Column < 0 || e.Problem == "" {
					t.Fatalf("malformed problem %#v", e)
				}
			}
			return
		}
		if d.Name == "" {
			t.Fatal("a domain without a name")
		}
		c, err := New(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, pl := range d.Plans() {
			if err := CheckLimits(pl.Limits); err != nil {
				t.Fatalf("plan %s: %v", pl.Name, err)
			}
		}
		ids := make(map[string]bool)
		for _, r := range d.Rules() {
			if ids[r.ID] {
				t.Fatalf("two rules with ID %q", r.ID)
			}
			ids[r.ID] = true
			if !r.Unlimited {
				if err := r.Limit.Validate(); err != nil {
					t.Fatalf("rule %s has an invalid limit: %v", r.ID, err)
				}
				if len(r.Limits) == 0 || r.Limits[0] != r.Limit {
					t.Fatalf("rule %s: Limits %v do not start with Limit %v", r.ID, r.Limits, r.Limit)
				}
				if r.Limit.Algorithm != floodgate.Concurrency {
					if err := CheckLimits(r.Limits); err != nil {
						t.Fatalf("rule %s: %v", r.ID, err)
					}
				}
			}
			if r.Metadata != nil {
				checkJSONLike(t, r.Metadata)
			}
			exact := true
			entries := make([]Entry, len(r.Path))
			for i, l := range r.Path {
				v := l.Value
				if v == "" || l.Wildcard() {
					exact = false
					v = strings.ReplaceAll(v, "*", "x") + "x"
				}
				entries[i] = Entry{l.Key, v}
			}
			got := c.Match(d.Name, entries)
			if exact && got != r {
				t.Fatalf("rule %s does not match its own path %v (got %v)", r.ID, entries, got)
			}
			_ = r.Key(entries)
			_ = r.MetricKey(entries)
			c.MatchAll(d.Name, [][]Entry{entries, entries[:len(entries)-1]})
		}
	})
}

// checkJSONLike fails unless v is made of what a google.protobuf.Struct
// holds: maps of strings, lists, strings, booleans, int64, finite float64
// and nil.
func checkJSONLike(t *testing.T, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			checkJSONLike(t, e)
		}
	case []any:
		for _, e := range x {
			checkJSONLike(t, e)
		}
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("metadata holds %v", x)
		}
	case nil, string, bool, int64:
	default:
		t.Fatalf("metadata holds a %T", v)
	}
}

// FuzzWildcard checks the matching of a wildcard value (a "*" anywhere)
// against a regular expression doing the same: each "*" any text, the
// rest literal.
func FuzzWildcard(f *testing.F) {
	for _, s := range [][2]string{
		{"foo*", "foobar"}, {"bar*b", "barb"}, {"foo*bar*baz", "foo1bar2baz"}, {"img*x*png", "imgpng"},
		{"*xyz", "xyz"}, {"a**b", "ab"}, {"ab*ba", "aba"}, {"*", ""}, {"v*z", "v*z"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !strings.Contains(pattern, "*") || len(pattern) > 64 || len(value) > 256 {
			return
		}
		parts := strings.Split(pattern, "*")
		quoted := make([]string, len(parts))
		for i, p := range parts {
			quoted[i] = regexp.QuoteMeta(p)
		}
		re, err := regexp.Compile("^(?s:" + strings.Join(quoted, ".*") + ")$")
		if err != nil || !utf8.ValidString(value) || !utf8.ValidString(pattern) {
			return
		}
		if got, want := matchParts(parts, value), re.MatchString(value); got != want {
			t.Fatalf("%q against %q: matchParts %v, regexp %v", pattern, value, got, want)
		}
	})
}

// FuzzMerge merges two parsed files of one domain (Loader.MergeDomains):
// no panic; an error is made of positioned *Error; a merged domain holds
// the rules of both, each matching its own exact path, and leaves the two
// domains as they were.
func FuzzMerge(f *testing.F) {
	seeds := func(dir string) {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) != 2 {
			f.Fatalf("%s: %v %v", dir, files, err)
		}
		a, _ := os.ReadFile(files[0])
		b, _ := os.ReadFile(files[1])
		f.Add(a, b)
	}
	seeds("testdata/upstream/merge")
	seeds("testdata/upstream/merge_dup")
	f.Fuzz(func(t *testing.T, a, b []byte) {
		da, err := parse("a.yaml", a, true)
		if err != nil {
			return
		}
		db, err := parse("b.yaml", b, true)
		if err != nil || db.Name != da.Name {
			return
		}
		before := len(da.Rules())
		c, err := Loader{MergeDomains: true}.New(da, db)
		if len(da.Rules()) != before {
			t.Fatal("merging changed the first domain")
		}
		if err != nil {
			for _, e := range Errors(err) {
				if (e.File != "a.yaml" && e.File != "b.yaml") || e.Line < 0 || e.Problem == "" {
					t.Fatalf("malformed problem %#v", e)
				}
			}
			if len(Errors(err)) == 0 {
				t.Fatalf("error without *Error: %v", err)
			}
			return
		}
		m := c.Domain(da.Name)
		if got, want := len(m.Rules()), len(da.Rules())+len(db.Rules()); got != want {
			t.Fatalf("%d rules merged, want %d", got, want)
		}
		for _, r := range m.Rules() {
			entries := make([]Entry, len(r.Path))
			exact := true
			for i, l := range r.Path {
				if l.Value == "" || l.Wildcard() {
					exact = false
				}
				entries[i] = Entry{l.Key, l.Value}
			}
			if got := m.Match(entries); exact && got != r {
				t.Fatalf("rule %s does not match its own path (got %v)", r.ID, got)
			}
		}
	})
}
