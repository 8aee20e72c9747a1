package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds Parse arbitrary bytes. Its seed corpus is every config of
// testdata plus testdata/fuzz/FuzzParse (the same configs and hostile YAML:
// alias bombs, self-references, deep nesting, merge loops). Parse must
// never panic; an error must be made of positioned *Error only; a domain it
// returns must be usable as is.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/ratelimit", "testdata/floodgate", "testdata/invalid"} {
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
			}
			exact := true
			entries := make([]Entry, len(r.Path))
			for i, l := range r.Path {
				v := l.Value
				if v == "" || l.Wildcard() {
					exact = false
					v = strings.TrimSuffix(v, "*") + "x"
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
