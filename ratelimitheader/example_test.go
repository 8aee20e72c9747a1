package ratelimitheader_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Set writes the fields of one limit after a decision; here the first of 60
// requests in a calendar minute, one second into it.
func ExampleSet() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start.Add(time.Second))})
	limit := floodgate.Limit{Limit: 60, Period: time.Minute}
	d, _ := limiter.Allow(context.Background(), "ip:192.0.2.1", limit)

	h := http.Header{}
	ratelimitheader.Set(h, limit, d, nil)
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	// Output:
	// RateLimit-Policy: "default";q=60;w=60
	// RateLimit: "default";r=59;t=59
}

// SetEach writes several limits checked together by AllowEach, one list
// item each, and Retry-After when they deny. The daily window is the
// calendar day (aligned), half over at noon.
func ExampleSetEach() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	limits := []floodgate.Limit{
		{Name: "burst", Limit: 2, Period: time.Second},
		{Name: "daily", Limit: 1000, Period: 24 * time.Hour},
	}
	var ds []floodgate.Decision
	for range 3 {
		_, ds, _ = limiter.AllowEach(context.Background(), "key:7", 1, limits...)
	}

	h := http.Header{}
	ratelimitheader.SetEach(h, limits, ds, &ratelimitheader.Options{Legacy: true})
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		fmt.Printf("%s: %s\n", name, h.Get(name))
	}
	// Output:
	// RateLimit-Policy: "burst";q=2;w=1, "daily";q=1000;w=86400
	// RateLimit: "burst";r=0;t=1, "daily";r=998;t=43200
	// Retry-After: 1
	// X-RateLimit-Limit: 2
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1
}

// Fields gives the same fields as name/value pairs, for a transport that
// is not an http.Header, such as Envoy's response_headers_to_add.
func ExampleFields() {
	limit := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Second, Burst: 20}
	d := floodgate.Decision{Allowed: true, Limit: 20, Remaining: 19, ResetAfter: 100 * time.Millisecond}
	for _, f := range ratelimitheader.Fields([]floodgate.Limit{limit}, []floodgate.Decision{d}, nil) {
		fmt.Printf("%s: %s\n", f.Name, f.Value)
	}
	// Output:
	// Ratelimit-Policy: "default";q=20;w=2
	// Ratelimit: "default";r=19;t=1
}

func ExampleRetryAfter() {
	fmt.Println(ratelimitheader.RetryAfter(200 * time.Millisecond))
	fmt.Println(ratelimitheader.RetryAfter(90 * time.Second))
	fmt.Printf("%q\n", ratelimitheader.RetryAfter(floodgate.Never))
	// Output:
	// 1
	// 90
	// ""
}
