package config_test

import (
	"fmt"

	"github.com/floodgate-rl/floodgate/config"
)

func ExampleFromSpec() {
	d, err := config.FromSpec("rl-sms", config.Spec{
		Domain: "sms",
		Descriptors: []config.DescriptorSpec{
			{Key: "recipient", RateLimit: &config.RateLimitSpec{Unit: "day", RequestsPerUnit: 50}},
			{Key: "sender", RateLimit: &config.RateLimitSpec{Unit: "fortnight", RequestsPerUnit: 5}},
		},
	})
	fmt.Println(err)
	d, err = config.FromSpec("rl-sms", config.Spec{
		Domain: "sms",
		Descriptors: []config.DescriptorSpec{
			{Key: "recipient", RateLimit: &config.RateLimitSpec{Unit: "day", RequestsPerUnit: 50}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range d.Rules() {
		fmt.Printf("%s %s: %v\n", r.File, r.ID, r.Limit)
	}
	// Output:
	// rl-sms: descriptors[1].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year; or a period such as 90s)
	// rl-sms sms|recipient: 50/24h0m0s fixed_window
}
