package config

import (
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
