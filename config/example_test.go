package config_test

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/config"
)

// The config of the package doc.
const sms = `
domain: sms
descriptors:
  - key: category
    value: promotional
    descriptors:
      - key: recipient          # any value; each value counted on its own
        rate_limit:
          unit: day
          requests_per_unit: 3
  - key: recipient
    rate_limit:
      name: per_recipient
      algorithm: gcra         # a Floodgate extension
      unit: day
      requests_per_unit: 50
      burst: 10
`

func ExampleParse() {
	d, err := config.Parse("sms.yaml", []byte(sms))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range d.Rules() {
		fmt.Printf("%s:%d %s: %v\n", r.File, r.Line, r.ID, r.Limit)
	}
	// Output:
	// sms.yaml:7 sms|category=promotional|recipient: 3/24h0m0s fixed_window
	// sms.yaml:11 sms|recipient: "per_recipient" 50/24h0m0s gcra burst=10
}

func ExampleParse_errors() {
	_, err := config.Parse("shop.yaml", []byte(`domain: shop
descriptors:
  - key: user
    rate_limit:
      unit: minutes
      requests_per_unit: 10
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 20, algoritm: gcra}
`))
	for _, e := range config.Errors(err) {
		fmt.Printf("%s:%d:%d: %s\n", e.File, e.Line, e.Column, e.Field)
	}
	fmt.Println(err)
	// Output:
	// shop.yaml:5:13: descriptors[0].rate_limit.unit
	// shop.yaml:7:5: descriptors[1].key
	// shop.yaml:8:55: descriptors[1].rate_limit.algoritm
	// shop.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit "minutes" (want second, minute, hour, day, week, month or year; or a period such as 90s)
	// shop.yaml:7:5: descriptors[1].key: duplicate descriptor: key "user" without a value is already at this level
	// shop.yaml:8:55: descriptors[1].rate_limit.algoritm: unknown field "algoritm" in rate_limit; did you mean "algorithm"?
}

func ExampleConfig_MatchAll() {
	c, err := config.LoadDir("testdata/ratelimit")
	if err != nil {
		fmt.Println(err)
		return
	}
	// One request, two descriptors: the second rule replaces the first.
	matches := c.MatchAll("api_tiers", [][]config.Entry{
		{{Key: "tier", Value: "standard"}, {Key: "user", Value: "alice"}},
		{{Key: "endpoint", Value: "export"}, {Key: "user", Value: "alice"}},
		{{Key: "unknown", Value: "x"}},
	})
	for i, m := range matches {
		switch {
		case m.Rule == nil:
			fmt.Printf("%d: no rule\n", i)
		case m.ReplacedBy != nil:
			fmt.Printf("%d: %s replaced by %s\n", i, m.Rule.ID, m.ReplacedBy.ID)
		case m.Limited():
			fmt.Printf("%d: check %v\n", i, m.Rule.Limit)
		}
	}
	// Output:
	// 0: api_tiers|tier=standard|user=alice replaced by api_tiers|endpoint=export|user=alice
	// 1: check 120/1m0s fixed_window
	// 2: no rule
}

func ExampleRule_Key() {
	c, err := config.LoadDir("testdata/ratelimit")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]config.Entry{
		{{Key: "recipient", Value: "2065550100"}},
		{{Key: "recipient", Value: "2065550199"}},
		{{Key: "bucket", Value: "reports/q1.pdf"}}, // share_threshold: one counter
		{{Key: "bucket", Value: "reports/q2.pdf"}},
	} {
		for _, domain := range []string{"sms", "paths"} {
			if r := c.Match(domain, entries); r != nil {
				fmt.Println(r.Key(entries))
			}
		}
	}
	// Output:
	// sms|recipient=2065550100
	// sms|recipient=2065550199
	// paths|bucket=reports/*
	// paths|bucket=reports/*
}

func ExampleValidate() {
	err := config.Validate("testdata/invalid/limits.yaml")
	fmt.Println(err)
	// Output:
	// testdata/invalid/limits.yaml:4:62: descriptors[0].rate_limit.burst: fixed_window takes no burst (only token_bucket and gcra do)
	// testdata/invalid/limits.yaml:6:80: descriptors[1].rate_limit.window: gcra takes no window (only fixed_window does)
	// testdata/invalid/limits.yaml:8:35: descriptors[2].rate_limit.unit: an unlimited rate limit takes no unit
	// testdata/invalid/limits.yaml:10:51: descriptors[3].rate_limit.requests_per_unit: 4294967296 is above 4294967295, the most Envoy's rate limit protocol can carry
}
