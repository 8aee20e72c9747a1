package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestMemory is the bypass: three instances that each count alone let the
// client through three times.
func TestMemory(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-store=memory", "-limit", "10", "-period", "1h"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	res, err := demo(t.Context(), config{store: "memory", instances: 3, limit: 10, period: time.Hour, requests: 40})
	if err != nil {
		t.Fatal(err)
	}
	sent, allowed := res.total()
	if sent != 40 || allowed != 30 {
		t.Errorf("sent %d, allowed %d; want 40 and 30 (3 × the limit)", sent, allowed)
	}
	for i, n := range res.allowed {
		if n != 10 || res.requests[i] < 13 {
			t.Errorf("instance %d: %d of %d allowed, want 10 of at least 13", i+1, n, res.requests[i])
		}
	}
	for _, want := range []string{"instance  requests  allowed  denied", "   total        40       30      10", "3.0 times its limit of 10"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestRedis is the fix: the same three instances sharing one Redis admit
// exactly the limit in total.
func TestRedis(t *testing.T) {
	srv := redistest.Standalone(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"-store=redis", "-redis-url", "redis://" + srv.Addr, "-limit", "10", "-period", "1h"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "   total        40       10      30") {
		t.Errorf("output lacks the total of 40 sent, 10 allowed:\n%s", &out)
	}
	// The demo's own key was used once above; a second run on a fresh
	// prefix would be the same, so check the figures of a direct run too.
	if _, err := srv.CLI(t.Context(), "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	res, err := demo(t.Context(), config{store: "redis", redisURL: "redis://" + srv.Addr, instances: 3, limit: 10, period: time.Hour, requests: 40})
	if err != nil {
		t.Fatal(err)
	}
	if sent, allowed := res.total(); sent != 40 || allowed != 10 {
		t.Errorf("sent %d, allowed %d; want 40 and exactly the limit, 10", sent, allowed)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-store=disk"}, {"-instances", "0"}, {"-requests", "-1"}, {"-period", "0s"}} {
		if err := run(t.Context(), args, &bytes.Buffer{}); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}
