package config_test

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/config"
)

func TestShareBy(t *testing.T) {
	d, err := config.Parse("api.yaml", []byte(`domain: api
descriptors:
  - key: upstream
    value: llm
    descriptors:
      - key: tenant
        rate_limit: {unit: second, requests_per_unit: 100, share_by: tenant}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := d.Rules()[0]
	if r.ShareBy != "tenant" {
		t.Fatalf("ShareBy = %q", r.ShareBy)
	}
	a, fa := r.Flow([]config.Entry{{Key: "upstream", Value: "llm"}, {Key: "tenant", Value: "a"}})
	b, fb := r.Flow([]config.Entry{{Key: "upstream", Value: "llm"}, {Key: "tenant", Value: "b|x"}})
	if a != b || fa != "a" || fb != "b|x" {
		t.Errorf("keys %q and %q (want one), flows %q and %q", a, b, fa, fb)
	}
	if a != "api|upstream=llm|tenant=" {
		t.Errorf("key %q", a)
	}
}

func TestShareByErrors(t *testing.T) {
	for _, c := range []struct {
		name, rule, field, msg string
	}{
		{"not a key of the path", `rate_limit: {unit: second, requests_per_unit: 100, share_by: user}`, "share_by", `"user" is not a key`},
		{"one value", `rate_limit: {unit: second, requests_per_unit: 100, share_by: upstream}`, "share_by", "matches one value"},
		{"gcra", `rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, share_by: tenant}`, "share_by", "algorithm: only fixed_window"},
		{"count rejected", `rate_limit: {unit: second, requests_per_unit: 100, count_rejected: true, share_by: tenant}`, "share_by", "count_rejected"},
		{"not a string", `rate_limit: {unit: second, requests_per_unit: 100, share_by: [tenant]}`, "share_by", ""},
		{"in a list", "rate_limits:\n          - {unit: second, requests_per_unit: 100, share_by: tenant}", "rate_limits[0].share_by", "decided alone"},
		{"unlimited", `rate_limit: {unlimited: true, share_by: tenant}`, "share_by", "no share_by"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := "domain: api\ndescriptors:\n  - key: upstream\n    value: llm\n    descriptors:\n      - key: tenant\n        " + c.rule + "\n"
			_, err := config.Parse("api.yaml", []byte(yaml))
			errs := config.Errors(err)
			if len(errs) == 0 {
				t.Fatalf("no error for\n%s", yaml)
			}
			e := errs[0]
			if !strings.HasSuffix(e.Field, c.field) || !strings.Contains(e.Problem, c.msg) || e.Line == 0 {
				t.Errorf("error %v (field %q, line %d), want one of field %q saying %q", e, e.Field, e.Line, c.field, c.msg)
			}
		})
	}
}
