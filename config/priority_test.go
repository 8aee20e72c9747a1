package config

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

func TestPriority(t *testing.T) {
	d, err := Parse("api.yaml", []byte(`domain: api
descriptors:
  - key: export
    priority: sheddable
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: health
    priority: critical
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]floodgate.Priority{}
	for _, r := range d.Rules() {
		got[r.Path[0].Key] = r.Priority
	}
	want := map[string]floodgate.Priority{"export": floodgate.Sheddable, "health": floodgate.Critical, "plain": ""}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: Priority = %q, want %q", k, got[k], w)
		}
	}
}

func TestPriorityErrors(t *testing.T) {
	src := `domain: api
descriptors:
  - key: a
    priority: urgent
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: b
    priority: sheddable
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
  - key: c
    priority: normal
    descriptors:
      - key: d
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: e
    priority: sheddable
    rate_limit: {unlimited: true}
  - key: f
    priority: [sheddable]
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: g
    priority: normal
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window, count_rejected: true}
  - key: h
    priority: normal
    rate_limit: {unit: fortnight, requests_per_unit: 100}
`
	_, err := Parse("api.yaml", []byte(src))
	checkErrors(t, "api.yaml", src, err, []want{
		{4, "urgent", "descriptors[0].priority", `"urgent" is not a class`},
		{7, "sheddable", "descriptors[1].priority", "cannot keep a reserve for sheddable requests: only gcra and fixed_window"},
		{10, "priority", "descriptors[2].priority", "this descriptor has none"},
		{15, "priority", "descriptors[3].priority", "unlimited"},
		{18, "[sheddable]", "descriptors[4].priority", "want a string"},
		{21, "normal", "descriptors[5].priority", "count_rejected"},
		{25, "fortnight", "descriptors[6].rate_limit.unit", "fortnight"},
	})
}

func TestPriorityReserves(t *testing.T) {
	d, err := Parse("api.yaml", []byte(`domain: api
priority_key: class
descriptors:
  - key: export
    priority: sheddable
    priority_reserves: {normal: 10, sheddable: 40%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: user
    priority_max: normal
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: gcra}
      - {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.PriorityKey != "class" {
		t.Errorf("PriorityKey = %q, want class", d.PriorityKey)
	}
	rules := map[string]*Rule{}
	for _, r := range d.Rules() {
		rules[r.Path[0].Key] = r
	}
	want := floodgate.Reserves{Normal: floodgate.ClassReserve{Units: 10}, Sheddable: floodgate.ClassReserve{Percent: 40}}
	if r := rules["export"]; r.Reserves == nil || *r.Reserves != want || r.Priority != floodgate.Sheddable || r.PriorityMax != "" {
		t.Errorf("export: reserves %+v, class %q, max %q", r.Reserves, r.Priority, r.PriorityMax)
	}
	if r := rules["user"]; r.Reserves != nil || r.PriorityMax != floodgate.Normal {
		t.Errorf("user: reserves %+v, max %q", r.Reserves, r.PriorityMax)
	}
	if r := rules["plain"]; r.Reserves != nil || r.PriorityMax != "" || r.Priority != "" {
		t.Errorf("plain: %+v %q %q", r.Reserves, r.PriorityMax, r.Priority)
	}
}

func TestPriorityReservesErrors(t *testing.T) {
	src := `domain: api
priority_key: ""
descriptors:
  - key: a
    priority_reserves: {normal: 10%, sheddable: 5%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: b
    priority_reserves: {critical: 5%, sheddable: 20%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: c
    priority_reserves: {normal: -5, sheddable: 20%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: d
    priority_reserves: {sheddable: 100}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: e
    priority_reserves: {urgent: 5%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: f
    priority_reserves: {sheddable: 20%}
    descriptors:
      - key: g
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: h
    priority_reserves: {sheddable: 30%}
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: gcra}
      - {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
  - key: i
    priority_reserves: {normal: 5, sheddable: 10%}
    rate_limits:
      - {unit: second, requests_per_unit: 100, algorithm: gcra}
      - {unit: minute, requests_per_unit: 20, algorithm: gcra}
  - key: j
    priority_reserves: {sheddable: 2.5%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: k
    priority_reserves: 20%
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: l
    priority: normal
    priority_max: sheddable
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: m
    priority_max: top
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: n
    priority_max: critical
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}
  - key: o
    priority_reserves: {sheddable: 20%}
    rate_limit: {unlimited: true}
  - key: p
    priority_reserves: {sheddable: 101%}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: q
    descriptors:
      - key: r
        priority_reserves: {sheddable: 20%}
        rate_limit: {unit: second, requests_per_unit: 100, algorithm: fixed_window, share_by: q}
`
	_, err := Parse("api.yaml", []byte(src))
	checkErrors(t, "api.yaml", src, err, []want{
		{2, `""`, "priority_key", "empty"},
		{5, "5%}", "descriptors[0].priority_reserves.sheddable", "5%: for the limit, sheddable keeps 5 units of 100, fewer than normal's 10"},
		{8, "critical", "descriptors[1].priority_reserves.critical", "critical takes the whole budget by definition"},
		{11, "-5", "descriptors[2].priority_reserves.normal", "cannot be negative"},
		{14, "100}", "descriptors[3].priority_reserves.sheddable", "keeps 100 units, the whole capacity 100 of the limit: sheddable requests would never be admitted"},
		{17, "urgent", "descriptors[4].priority_reserves.urgent", `unknown field "urgent" in priority_reserves`},
		{20, "priority_reserves", "descriptors[5].priority_reserves", "this descriptor has none"},
		{25, "{sheddable", "descriptors[6].priority_reserves", "rate_limits[1] (100/1m0s token_bucket) cannot keep a reserve for sheddable requests"},
		{30, "10%}", "descriptors[7].priority_reserves.sheddable", "10%: for rate_limits[1]"},
		{35, "2.5%", "descriptors[8].priority_reserves.sheddable", "not a whole percent"},
		{38, "20%", "descriptors[9].priority_reserves", "want a mapping of normal and sheddable"},
		{42, "sheddable", "descriptors[10].priority_max", "below the rule's default class normal"},
		{45, "top", "descriptors[11].priority_max", `"top" is not a class`},
		{48, "critical", "descriptors[12].priority_max", "cannot keep a reserve for normal requests"},
		{51, "priority_reserves", "descriptors[13].priority_reserves", "unlimited"},
		{54, "101%", "descriptors[14].priority_reserves.sheddable", "more than the whole capacity"},
		{59, "priority_reserves", "descriptors[15].descriptors[0].priority_reserves", "share_by"},
	})
}

func TestPriorityKeyMerge(t *testing.T) {
	a, err := Parse("a.yaml", []byte("domain: api\npriority_key: class\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte("domain: api\npriority_key: tier\ndescriptors:\n  - key: y\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("c.yaml", []byte("domain: api\ndescriptors:\n  - key: z\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := merge(a, b); err == nil || !strings.Contains(err.Error(), `priority_key "tier"`) {
		t.Errorf("two keys merged: %v, want an error naming both", err)
	}
	m, err := merge(c, a)
	if err != nil || m.PriorityKey != "class" {
		t.Errorf("merge with one key: %v, %q", err, m.PriorityKey)
	}
}
