package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

func TestServeRegionFlags(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "-home", "redis://127.0.0.1:1"},
		{"serve", "-region", "eu"},
		{"serve", "-region", "e u", "-home", "redis://127.0.0.1:1"},
		{"serve", "-region", "eu", "-home", "redis://127.0.0.1:1", "-region-safe-share", "2"},
		{"serve", "-region", "eu", "-home", "redis://127.0.0.1:1", "-region-term", "10ms"},
		{"serve", "-region-safe-share", "0.1"},
		{"serve", "-region", "eu", "-home", "redis://127.0.0.1:1", "-region-policy", "fair"},
		{"serve", "-region-policy", "equal"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, stderr.String())
		}
	}
}

// TestServeRegions runs two instances in two regions, each on its own
// memory store, sharing a global rule of 20 per hour through one home
// Redis, and one instance without -region, where the same rule is local.
// Together the two regions admit at most 20 in the hour, and admit more
// than either held at first (the share moved to where the demand was).
func TestServeRegions(t *testing.T) {
	home := redistest.Standalone(t)
	dir, _ := writeConfig(t, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 20, global: true}\n")
	a := startServe(t, "-config", dir, "-region", "a", "-home", "redis://"+home.Addr, "-timeout", "2s")
	b := startServe(t, "-config", dir, "-region", "b", "-home", "redis://"+home.Addr, "-timeout", "2s")
	plain := startServe(t, "-config", dir)
	body := `{"domain": "edge", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`
	allowed := func(in *instance) bool {
		code, resp := in.allow(t, body)
		var d struct {
			Allowed bool `json:"allowed"`
		}
		if err := json.Unmarshal([]byte(resp), &d); err != nil || code != 200 {
			t.Fatalf("allow: %d %s", code, resp)
		}
		return d.Allowed
	}
	hour := time.Now().Truncate(time.Hour)
	var na, nb int
	// a asks first and takes what is free; then b asks, and the shares
	// follow the demand over the next rebalances (500 ms each).
	for range 10 {
		if allowed(a) {
			na++
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && nb == 0 {
		for range 5 {
			if allowed(b) {
				nb++
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 40 {
		if allowed(a) {
			na++
		}
		if allowed(b) {
			nb++
		}
	}
	if !time.Now().Truncate(time.Hour).Equal(hour) {
		t.Skip("the run crossed an hour boundary, where the windows restart; run it again")
	}
	if na+nb > 20 {
		t.Errorf("regions a and b admitted %d and %d of a global 20 per hour: %d above it", na, nb, na+nb-20)
	}
	if nb == 0 || na == 0 {
		t.Errorf("a admitted %d and b %d: want both above 0 (b's share came from a)", na, nb)
	}
	var np int
	for range 25 {
		if allowed(plain) {
			np++
		}
	}
	if np != 20 {
		t.Errorf("without -region the global rule admitted %d of 25, want 20 (a local limit)", np)
	}
	// The regions' metrics: one key each, of limit 20, shares that sum to
	// at most 20, and home answered; the plain instance has none.
	var shares int64
	for _, in := range []*instance{a, b} {
		if keys, limit, ok := in.metric(t, "floodgate_region_keys"), in.metric(t, "floodgate_region_limit_units"), in.metric(t, `floodgate_region_home_calls_total{result="ok"}`); keys != 1 || limit != 20 || ok <= 0 {
			t.Errorf("region metrics: %d keys, limit %d, %d home calls ok; want 1, 20 and some", keys, limit, ok)
		}
		shares += in.metric(t, "floodgate_region_share_units")
	}
	if shares < 0 || shares > 20 {
		t.Errorf("the regions' shares sum to %d, want 0 to 20", shares)
	}
	if v := plain.metric(t, "floodgate_region_keys"); v != -1 {
		t.Errorf("without -region, floodgate_region_keys = %d, want no such metric", v)
	}
	t.Logf("a admitted %d, b %d, of 20", na, nb)
}
