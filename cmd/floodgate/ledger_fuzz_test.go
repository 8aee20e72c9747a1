package main

import (
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// FuzzLimitSpec: any -limit text: no panic; an accepted spec is a valid
// fixed window whose units and period are the text's.
func FuzzLimitSpec(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLimitSpec(s)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil || l.EffectiveAlgorithm() != floodgate.FixedWindow {
			t.Fatalf("parseLimitSpec(%q) = %v, an invalid or other limit (%v)", s, l, err)
		}
		if !strings.Contains(s, "/") {
			t.Fatalf("parseLimitSpec(%q) accepted a spec without a period", s)
		}
	})
}

// fuzzConfig is the config FuzzServeKey matches keys against: a key-only
// level, an exact value, a wildcard and a shared wildcard.
const fuzzConfig = `
domain: a|b
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: path
    value: /api*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 20}
  - key: plan
    value: gold
    descriptors:
      - key: tenant
        rate_limit: {unit: month, requests_per_unit: 30}
`

// FuzzServeKey: any ledger key read back as a counter of floodgate serve:
// no panic; a key matched to a rule is exactly that rule's counter for
// the entries read from it.
func FuzzServeKey(f *testing.F) {
	d, err := config.Parse("fuzz.yaml", []byte(fuzzConfig))
	if err != nil {
		f.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		r := ruleOf(cfg, key)
		if r == nil {
			return
		}
		if !strings.HasPrefix(key, serveKeyPrefix+"a%7Cb|") {
			t.Fatalf("ruleOf(%q) = rule %s for a key outside the domain", key, r.ID)
		}
	})
}
