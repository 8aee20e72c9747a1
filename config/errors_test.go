package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
)

// want is one expected problem: its line, the text it points at (its
// column is where that text first appears on the line; "" for no column),
// the field, and a part of the message.
type want struct {
	line  int
	at    string
	field string
	msg   string
}

func (w want) String() string { return fmt.Sprintf("%d:%q %s: …%s…", w.line, w.at, w.field, w.msg) }

// checkErrors asserts that err holds exactly the wanted problems, in order.
// src is the file's text, to find the column of each want.
func checkErrors(t *testing.T, file, src string, err error, wants []want) {
	t.Helper()
	lines := strings.Split(src, "\n")
	if err == nil {
		t.Fatalf("no error, want %v", wants)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error does not wrap ErrInvalid: %v", err)
	}
	got := Errors(err)
	for i := range max(len(got), len(wants)) {
		switch {
		case i >= len(got):
			t.Errorf("missing problem %v", wants[i])
		case i >= len(wants):
			t.Errorf("unexpected problem %v", got[i])
		default:
			g, w := got[i], wants[i]
			col := 0
			if w.at != "" {
				if w.line < 1 || w.line > len(lines) || !strings.Contains(lines[w.line-1], w.at) {
					t.Fatalf("test bug: line %d does not hold %q", w.line, w.at)
				}
				col = strings.Index(lines[w.line-1], w.at) + 1
			}
			if g.File != file || g.Line != w.line || g.Column != col || g.Field != w.field || !strings.Contains(g.Problem, w.msg) {
				t.Errorf("problem %d:\n got %v\nwant %v", i, g, w)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		yaml string
		want []want
	}{
		{"misspelled descriptor field", `
domain: d
descriptors:
  - key: k
    rate_limt: {unit: second, requests_per_unit: 1}
`, []want{{5, "rate_limt", "descriptors[0].rate_limt", `unknown field "rate_limt" in a descriptor; did you mean "rate_limit"?`}}},

		{"misspelled rate_limit field", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_units: 1
`, []want{
			{6, "unit", "descriptors[0].rate_limit.requests_per_unit", "missing requests_per_unit"},
			{7, "requests_per_units", "descriptors[0].rate_limit.requests_per_units", `did you mean "requests_per_unit"?`},
		}},

		{"misspelled top-level field", `
domain_name: d
descriptors: []
`, []want{
			{2, "domain_name", "domain_name", `unknown field "domain_name" in the top level (want domain, descriptors, plans, priority_key)`},
			{2, "domain_name", "domain", "missing domain"},
		}},

		{"suggestion ignores case", `
Domain: d
`, []want{
			{2, "Domain", "Domain", `did you mean "domain"?`},
			{2, "Domain", "domain", "missing domain"},
		}},

		{"rate_limit field in the descriptor", `
domain: d
descriptors:
  - key: k
    unit: second
`, []want{{5, "unit", "descriptors[0].unit", "it belongs inside rate_limit"}}},

		{"descriptor field in rate_limit", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}
`, []want{{5, "shadow_mode", "descriptors[0].rate_limit.shadow_mode", "it belongs in the descriptor, beside rate_limit"}}},

		{"duplicate key and value", `
domain: d
descriptors:
  - key: k
    value: v
  - key: k
    value: v
`, []want{{6, "key", "descriptors[1].key", `duplicate descriptor: key "k" with value "v" is already at this level`}}},

		{"duplicate key-only", `
domain: d
descriptors:
  - key: k
    descriptors:
      - key: sub
      - key: sub
`, []want{{7, "key", "descriptors[0].descriptors[1].key", `duplicate descriptor: key "sub" without a value`}}},

		{"duplicate wildcard", `
domain: d
descriptors:
  - {key: k, value: "a*"}
  - {key: k, value: "a*"}
`, []want{{5, "key", "descriptors[1].key", `key "k" with value "a*"`}}},

		{"same key and value at different levels is fine", `
domain: d
descriptors:
  - key: k
    value: v
    descriptors:
      - key: k
        value: v
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`, nil},

		{"bad unit", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minutes, requests_per_unit: 1}
`, []want{{5, "minutes", "descriptors[0].rate_limit.unit", `unknown unit "minutes" (want second, minute, hour, day, week, month or year; or a period such as 90s)`}}},

		{"negative requests_per_unit", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: -1}
`, []want{{5, "-1", "descriptors[0].rate_limit.requests_per_unit", "-1 is negative"}}},

		{"requests_per_unit above uint32", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4294967296}
`, []want{{5, "4294967296", "descriptors[0].rate_limit.requests_per_unit", "above 4294967295"}}},

		{"requests_per_unit not an integer", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: ten}
  - key: q
    rate_limit: {unit: second, requests_per_unit: "5"}
  - key: f
    rate_limit: {unit: second, requests_per_unit: 1.5}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 010}
  - key: o
    rate_limit: {unit: second, requests_per_unit: 99999999999999999999}
`, []want{
			{5, "ten", "descriptors[0].rate_limit.requests_per_unit", `want an integer, not "ten"`},
			{7, `"5"`, "descriptors[1].rate_limit.requests_per_unit", `want an integer, not the string "5"`},
			{9, "1.5", "descriptors[2].rate_limit.requests_per_unit", `want an integer, not "1.5"`},
			{11, "010", "descriptors[3].rate_limit.requests_per_unit", "010 has a leading zero"},
			{13, "999", "descriptors[4].rate_limit.requests_per_unit", "want an integer"}, // go-yaml reads it as a float
		}},

		{"missing unit and requests_per_unit", `
domain: d
descriptors:
  - key: k
    rate_limit:
      name: n
`, []want{
			{6, "name", "descriptors[0].rate_limit.unit", "missing unit"},
			{6, "name", "descriptors[0].rate_limit.requests_per_unit", "missing requests_per_unit"},
		}},

		{"empty rate_limit", `
domain: d
descriptors:
  - key: k
    rate_limit: {}
`, []want{
			{5, "{}", "descriptors[0].rate_limit.unit", "missing unit"},
			{5, "{}", "descriptors[0].rate_limit.requests_per_unit", "missing requests_per_unit"},
		}},

		{"unit and period", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, period: 2s, requests_per_unit: 1}
`, []want{{5, "period", "descriptors[0].rate_limit.period", "give unit or period, not both"}}},

		{"bad period", `
domain: d
descriptors:
  - key: k
    rate_limit: {period: 5 minutes, requests_per_unit: 1}
  - key: z
    rate_limit: {period: 0s, requests_per_unit: 1}
  - key: n
    rate_limit: {period: -1m, requests_per_unit: 1}
  - key: u
    rate_limit: {period: 1ns, requests_per_unit: 1}
`, []want{
			{5, "5 minutes", "descriptors[0].rate_limit.period", `"5 minutes" is not a duration`},
			{7, "0s", "descriptors[1].rate_limit.period", "0s must be above zero"},
			{9, "-1m", "descriptors[2].rate_limit.period", "-1m0s must be above zero"},
			{11, "1ns", "descriptors[3].rate_limit.period", "not a whole number of microseconds"},
		}},

		{"limits that fail floodgate.Limit.Validate", `
domain: d
descriptors:
  - key: alg
    rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 1}
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 1, burst: 5}
  - key: window
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, window: first_hit}
  - key: count
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 1, count_rejected: true}
  - key: log
    rate_limit: {algorithm: sliding_window_log, unit: second, requests_per_unit: 4294967295}
  - key: wide
    rate_limit: {algorithm: sliding_window, unit: year, requests_per_unit: 4294967295}
  - key: nburst
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, burst: -2}
  - key: win
    rate_limit: {unit: second, requests_per_unit: 1, window: sliding}
  - key: lease
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1, local_budget: 5}
`, []want{
			{5, "leaky_bucket", "descriptors[0].rate_limit.algorithm", `unknown algorithm "leaky_bucket"`},
			{7, "5}", "descriptors[1].rate_limit.burst", "fixed_window takes no burst"},
			{9, "first_hit", "descriptors[2].rate_limit.window", "gcra takes no window"},
			{11, "true", "descriptors[3].rate_limit.count_rejected", "token_bucket does not count rejected requests"},
			{13, "4294967295", "descriptors[4].rate_limit.requests_per_unit", "the maximum for sliding_window_log"},
			{15, "4294967295", "descriptors[5].rate_limit.requests_per_unit", "above 2^52 for sliding_window"},
			{17, "-2", "descriptors[6].rate_limit.burst", "-2 is negative"},
			{19, "sliding", "descriptors[7].rate_limit.window", `unknown window "sliding"`},
			{21, "5}", "descriptors[8].rate_limit.local_budget", "5 is above limit 1: for gcra it is the most of the rate"},
		}},

		{"field problems and Validate problems in one rate_limit", `
domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: leaky, burst: 5, window: first_hit, unit: sec, requests_per_unit: x}
  - key: j
    rate_limit: {algorithm: sliding_window, unit: year, period: 1s, requests_per_unit: 4294967295}
`, []want{
			{5, "leaky", "descriptors[0].rate_limit.algorithm", `unknown algorithm "leaky"`},
			{5, "sec", "descriptors[0].rate_limit.unit", `unknown unit "sec"`},
			{5, "x}", "descriptors[0].rate_limit.requests_per_unit", `want an integer, not "x"`},
			{7, "period", "descriptors[1].rate_limit.period", "give unit or period, not both"},
		}},

		{"bad failure mode", `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, failure_mode: fail_local}
`, []want{{5, "fail_local", "descriptors[0].rate_limit.failure_mode", `unknown failure mode "fail_local" (want fail_open, fail_closed or local)`}}},

		{"unlimited with a unit and extensions", `
domain: d
descriptors:
  - key: k
    rate_limit:
      unlimited: true
      unit: second
      requests_per_unit: 5
      algorithm: gcra
`, []want{
			{7, "unit", "descriptors[0].rate_limit.unit", "an unlimited rate limit takes no unit"},
			{9, "algorithm", "descriptors[0].rate_limit.algorithm", "an unlimited rate limit takes no algorithm"},
		}},

		{"replaces problems", `
domain: d
descriptors:
  - key: a
    rate_limit: {name: a_limit, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit:
      name: b_limit
      unit: second
      requests_per_unit: 1
      replaces:
        - name: a_limt
        - name: b_limit
        - name: ""
        - nam: a_limit
        - {}
        - a_limit
`, []want{
			{12, "a_limt", "descriptors[1].rate_limit.replaces[0].name", `replaces "a_limt", but no rate_limit of domain "d" has that name`},
			{13, "b_limit", "descriptors[1].rate_limit.replaces[1].name", `a rate limit cannot replace itself ("b_limit")`},
			{14, `""`, "descriptors[1].rate_limit.replaces[2].name", "empty name"},
			{15, "nam", "descriptors[1].rate_limit.replaces[3].nam", `did you mean "name"?`},
			{15, "nam", "descriptors[1].rate_limit.replaces[3].name", "missing name"},
			{16, "{}", "descriptors[1].rate_limit.replaces[4].name", "missing name"},
			{17, "a_limit", "descriptors[1].rate_limit.replaces[5]", `want {name: ...}, not "a_limit"`},
		}},

		{"key problems", `
domain: d
descriptors:
  - value: v
  - key: ""
  - key: [a, b]
`, []want{
			{4, "value", "descriptors[0].key", "missing key"},
			{5, `""`, "descriptors[1].key", "empty key"},
			{6, "[", "descriptors[2].key", "want a string, not a list"},
		}},

		{"empty domain", `
domain: ""
`, []want{{2, `""`, "domain", "empty domain"}}},

		{"field given twice", `
domain: d
descriptors:
  - key: k
    key: j
`, []want{{5, "key", "descriptors[0].key", "given twice (first at line 4)"}}},

		{"wrong shapes", `
domain: d
descriptors:
  - key: a
    descriptors: {key: b}
  - key: c
    rate_limit: 10/s
  - just a string
descriptors_extra: 1
`, []want{
			{5, "{", "descriptors[0].descriptors", "want a list of descriptors, not a mapping"},
			{7, "10/s", "descriptors[1].rate_limit", `want a mapping with unit and requests_per_unit, not "10/s"`},
			{8, "just", "descriptors[2]", `want a descriptor (a mapping with key and optionally value, rate_limit, descriptors), not "just a string"`},
			{9, "descriptors_extra", "descriptors_extra", `unknown field "descriptors_extra"`},
		}},

		{"descriptors not a list", `
domain: d
descriptors: all
`, []want{{3, "all", "descriptors", `want a list of descriptors, not "all"`}}},

		{"bad booleans", `
domain: d
descriptors:
  - key: k
    shadow_mode: maybe
    detailed_metric: "true"
    rate_limit: {unit: second, requests_per_unit: 1, unlimited: 1}
`, []want{
			{5, "maybe", "descriptors[0].shadow_mode", `want true or false, not "maybe"`},
			{6, `"true"`, "descriptors[0].detailed_metric", `want true or false, not the string "true"`},
			{7, "1}", "descriptors[0].rate_limit.unlimited", `want true or false, not "1"`},
		}},

		{"top level not a mapping", `
- domain: d
`, []want{{2, "-", "", "want a mapping with domain and descriptors, not a list"}}},

		{"a second document", `
domain: d
---
domain: e
`, []want{{3, "---", "", "a second YAML document"}}},

		{"a document after an empty one", `
domain: d
---
---
domain: e
`, []want{{4, "---", "", "a second YAML document"}}},

		{"trailing empty documents are fine", `
domain: d
---
---
`, nil},

		{"merge of a scalar", `
domain: d
descriptors:
  - <<: 5
    key: k
`, []want{{4, "5", "descriptors[0]", `<< merges a mapping or a list of mappings, not "5"`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := Parse("f.yaml", []byte(tc.yaml))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if d != nil {
				t.Errorf("Parse returned a domain with an error")
			}
			checkErrors(t, "f.yaml", tc.yaml, err, tc.want)
		})
	}
}

// TestParseSyntaxErrors checks the lines of go-yaml's syntax errors: where
// the construct that failed begins, or where the parser found the problem
// (no column).
func TestParseSyntaxErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		line int
		msg  string
	}{
		{"domain: d\ndescriptors:\n  - key: [a\n", 3, "did not find expected ',' or ']'"},
		{"domain: d\nx: {a: 1\n\n\n", 2, "did not find expected ',' or '}'"},
		{"domain: d\ndescriptors:\n  - key: a\n bad: 2\n", 4, "did not find expected key"},
		{"domain: [x\n", 2, "did not find expected ',' or ']'"}, // where the end of the file was found
		{"domain: d\nkey: a: b\n", 2, "mapping values are not allowed in this context"},
		{"domain: d\nkey: \"open\n", 2, "found unexpected end of stream"},
		{"domain: d\n\t- key: a\n", 2, "found a tab character that violates indentation"},
	} {
		_, err := Parse("s.yaml", []byte(tc.yaml))
		errs := Errors(err)
		if len(errs) != 1 || errs[0].Line != tc.line || errs[0].Column != 0 || errs[0].Problem != tc.msg {
			t.Errorf("Parse(%q) = %v, want s.yaml:%d: %s", tc.yaml, err, tc.line, tc.msg)
		}
	}
}

func TestParseEmpty(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "\n", "# only a comment\n", "---\n", "~\n"} {
		_, err := Parse("empty.yaml", []byte(data))
		checkErrors(t, "empty.yaml", data, err, []want{{0, "", "", "empty file"}})
	}
}

// TestParseAllAtOnce is the promise of the package: one run reports every
// problem, in file order, with file:line:column and field.
func TestParseAllAtOnce(t *testing.T) {
	t.Parallel()
	src := `domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minutes
      requests_per_unit: 10
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: ip
    shadow: true
    rate_limit:
      unit: second
      requests_per_unit: -5
      replaces:
        - name: nobody
`
	_, err := Parse("all.yaml", []byte(src))
	checkErrors(t, "all.yaml", src, err, []want{
		{5, "minutes", "descriptors[0].rate_limit.unit", `unknown unit "minutes"`},
		{7, "key", "descriptors[1].key", `duplicate descriptor: key "user" without a value`},
		{12, "shadow", "descriptors[2].shadow", `unknown field "shadow" in a descriptor`},
		{15, "-5", "descriptors[2].rate_limit.requests_per_unit", "-5 is negative"},
		{17, "nobody", "descriptors[2].rate_limit.replaces[0].name", `replaces "nobody"`},
	})
	want := `all.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "minutes" (want second, minute, hour, day, week, month or year; or a period such as 90s)
all.yaml:7:5: descriptors[1].key: duplicate descriptor: key "user" without a value is already at this level
all.yaml:12:5: descriptors[2].shadow: unknown field "shadow" in a descriptor`
	if got := err.Error(); !strings.HasPrefix(got, want) {
		t.Errorf("Error() =\n%s\nwant it to start with\n%s", got, want)
	}
}

func TestParseNestingLimit(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	indent := ""
	for i := range maxDepth + 1 {
		fmt.Fprintf(&b, "%s  - key: k%d\n%s    descriptors:\n", indent, i, indent)
		indent += "    "
	}
	_, err := Parse("deep.yaml", []byte(b.String()))
	errs := Errors(err)
	if len(errs) != 1 || !strings.Contains(errs[0].Problem, "nested deeper than 64") {
		t.Fatalf("want one error about nesting, got %v", err)
	}
}

// TestParseAliasBomb feeds the "billion laughs": descriptors whose
// children are aliases of descriptors whose children are aliases, 10^8
// descriptors once expanded, each a duplicate of its siblings. Parse must
// stop early, at the problem cap; BenchmarkParseHostile times it.
func TestParseAliasBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("l0: &l0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "l%d: &l%d {key: k, descriptors: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	b.WriteString("domain: bomb\ndescriptors: [*l8]\n")
	_, err := Parse("bomb.yaml", []byte(b.String()))
	errs := Errors(err)
	if len(errs) == 0 || len(errs) > maxErrors+1 {
		t.Fatalf("%d problems, want 1 to %d", len(errs), maxErrors+1)
	}
	if last := errs[len(errs)-1]; !strings.Contains(last.Problem, "stopped here") {
		t.Errorf("last problem %v, want a note that Parse stopped", last)
	}
}

// wideBomb has 10^9 descriptors once expanded, all distinct, so that no
// problem stops the walk early: only the node budget does.
func wideBomb() string {
	var b strings.Builder
	b.WriteString("domain: d\n")
	for lvl := 0; lvl <= 8; lvl++ {
		fmt.Fprintf(&b, "l%d: &l%d [", lvl, lvl)
		for i := range 10 {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}", i)
			if lvl > 0 {
				fmt.Fprintf(&b, ", descriptors: *l%d", lvl-1)
			}
			b.WriteString("}")
		}
		b.WriteString("]\n")
	}
	b.WriteString("descriptors: *l8\n")
	return b.String()
}

// TestParseWideAliasBomb checks that a small file cannot buy a long walk:
// the budget grows with the file, so these 7 KB stop after some 90,000
// nodes; BenchmarkParseHostile times it.
func TestParseWideAliasBomb(t *testing.T) {
	t.Parallel()
	_, err := Parse("wide.yaml", []byte(wideBomb()))
	errs := Errors(err)
	if len(errs) == 0 || !strings.Contains(errs[len(errs)-1].Problem, "too many YAML nodes") {
		t.Fatalf("got %v, want the walk stopped by the node budget", err)
	}
}

func TestParseSelfAlias(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		"domain: d\ndescriptors: &a [{key: k, descriptors: *a}]\n",
		"domain: d\ndescriptors:\n  - &m {key: k, <<: *m}\n",
		"a: &a [*a]\ndomain: d\ndescriptors: *a\n",
	} {
		_, err := Parse("self.yaml", []byte(data))
		if err == nil {
			t.Errorf("Parse(%q): no error", data)
		}
		for _, e := range Errors(err) {
			if len(e.Field) > maxFieldLen+len("…") {
				t.Errorf("field of %d bytes: %s", len(e.Field), e.Field)
			}
		}
	}
}

// TestErrorIsFieldError: a config problem is found by errors.As as the
// floodgate.FieldError every edge reports, with the field's path.
func TestErrorIsFieldError(t *testing.T) {
	t.Parallel()
	_, err := Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"))
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	if !ok || fe.Field != "descriptors[0].rate_limit.unit" || !strings.Contains(fe.Problem, "fortnight") || !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.As(%v) = %+v, %v; want the FieldError of descriptors[0].rate_limit.unit, wrapping ErrInvalid", err, fe, ok)
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{*newError("a.yaml", 3, 5, "descriptors[0].key", "empty key"), "a.yaml:3:5: descriptors[0].key: empty key"},
		{*newError("a.yaml", 3, 0, "", "did not find expected key"), "a.yaml:3: did not find expected key"},
		{*newError("a.yaml", 0, 0, "", "empty file"), "a.yaml: empty file"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

// TestParseAliasReuse checks that reusing a subtree through aliases, as a
// long config may, is not mistaken for an alias bomb: here the file expands
// to more nodes than it has bytes.
func TestParseAliasReuse(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("domain: reuse\ndescriptors:\n  - key: customer\n    value: c0\n    descriptors: &common\n")
	for i := range 100 {
		fmt.Fprintf(&b, "      - {key: endpoint, value: e%d, rate_limit: {unit: second, requests_per_unit: 5}}\n", i)
	}
	for i := 1; i < 300; i++ {
		fmt.Fprintf(&b, "  - {key: customer, value: c%d, descriptors: *common}\n", i)
	}
	d, err := Parse("reuse.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(d.Rules()); got != 300*100 {
		t.Errorf("%d rules, want %d", got, 300*100)
	}
	if d.Match(e("customer", "c299", "endpoint", "e99")) == nil {
		t.Error("no match through the alias")
	}
}

// TestParseLongText checks that problems quoting huge user text stay short.
func TestParseLongText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 100000)
	key := strings.Repeat("é", 500) // YAML keys are at most 1024 characters
	_, err := Parse("long.yaml", []byte("domain: d\n"+key+": 1\ndescriptors:\n  - key: k\n    rate_limit: {unit: "+long+", requests_per_unit: 1}\n"))
	errs := Errors(err)
	if len(errs) != 2 {
		t.Fatalf("got %v, want 2 problems", err)
	}
	for _, e := range errs {
		if len(e.Field) > maxFieldLen+len("…")+4 || len(e.Problem) > maxMsgLen+len("…")+4 || !utf8.ValidString(e.Field) || !utf8.ValidString(e.Problem) {
			t.Errorf("field of %d bytes, message of %d bytes (valid UTF-8: %v, %v)", len(e.Field), len(e.Problem), utf8.ValidString(e.Field), utf8.ValidString(e.Problem))
		}
	}
}

// TestParseLease checks that local_budget reaches floodgate.Limit.LocalBudget.
func TestParseLease(t *testing.T) {
	d, err := Parse("lease.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000, local_budget: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	rules := d.Rules()
	if len(rules) != 1 {
		t.Fatalf("%d rules, want 1", len(rules))
	}
	if got := rules[0].Limit.LocalBudget; got != 50 {
		t.Errorf("Limit.LocalBudget = %d, want 50", got)
	}

	// A token bucket or GCRA takes one too: the most of its rate one
	// server holds.
	d, err = Parse("lease.yaml", []byte(`
domain: d
descriptors:
  - key: tb
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 100, burst: 200, local_budget: 40}
  - key: g
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 100, local_budget: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{40, 100} {
		if got := d.Rules()[i].Limit.LocalBudget; got != want {
			t.Errorf("rule %d: Limit.LocalBudget = %d, want %d", i, got, want)
		}
	}
}

// TestParseGlobal checks that global reaches floodgate.Limit.Global, and
// that a limit that cannot be global is an error at the field.
func TestParseGlobal(t *testing.T) {
	d, err := Parse("global.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1000, global: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if rules := d.Rules(); len(rules) != 1 || !rules[0].Limit.Global {
		t.Fatalf("rules %+v, want one global rule", rules)
	}
	_, err = Parse("global.yaml", []byte(`
domain: d
descriptors:
  - key: k
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 1000, global: true}
`))
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "descriptors[0].rate_limit.global" || ce.Line != 5 {
		t.Fatalf("Parse of a global gcra = %v, want an error at descriptors[0].rate_limit.global, line 5", err)
	}
}
