// Command rlsload is a load generator for Envoy's rate limit service
// protocol (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit),
// used to measure `floodgate serve` and envoyproxy/ratelimit alike.
//
// Each of -callers goroutines sends one request at a time, one descriptor
// {key: user, value: u<N>} with N cycling through -keys values (a share
// -hot of requests uses value "hot" instead), over -conns gRPC connections,
// until -duration ends. Every call's latency is recorded in an HDR
// histogram. It talks only to loopback addresses.
//
//	go run ./rlsload -addr 127.0.0.1:8081 -callers 64 -duration 10s -domain bench -keys 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	rlsv3common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	maxDuration = 60 * time.Second
	maxCallers  = 4096
	maxConns    = 64
	// maxCallsPerCaller bounds every loop in count as well as in time.
	maxCallsPerCaller = 50_000_000
)

type result struct {
	hist              *hdrhistogram.Histogram
	ok, over, unknown int64
	errors            int64
	firstErr          error
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "gRPC `address` of the rate limit service (loopback only)")
	callers := flag.Int("callers", 16, "concurrent callers, each with one request in flight")
	conns := flag.Int("conns", 4, "gRPC connections, shared round-robin by the callers")
	duration := flag.Duration("duration", 10*time.Second, "how long to send (at most 60s)")
	warmup := flag.Duration("warmup", time.Second, "load sent before measuring, not counted (at most 10s)")
	domain := flag.String("domain", "bench", "rate limit domain")
	keys := flag.Int("keys", 100000, "distinct values of the user descriptor")
	hot := flag.Float64("hot", 0, "share of requests (0..1) sent for value \"hot\" instead")
	timeout := flag.Duration("timeout", time.Second, "deadline of each call")
	flag.Parse()

	if err := checkLoopback(*addr); err != nil {
		fail(err)
	}
	switch {
	case *duration <= 0 || *duration > maxDuration:
		fail(fmt.Errorf("-duration %v: must be in (0, %v]", *duration, maxDuration))
	case *warmup < 0 || *warmup > 10*time.Second:
		fail(fmt.Errorf("-warmup %v: must be in [0, 10s]", *warmup))
	case *callers < 1 || *callers > maxCallers:
		fail(fmt.Errorf("-callers %d: must be in [1, %d]", *callers, maxCallers))
	case *conns < 1 || *conns > maxConns:
		fail(fmt.Errorf("-conns %d: must be in [1, %d]", *conns, maxConns))
	case *keys < 1:
		fail(fmt.Errorf("-keys %d: must be at least 1", *keys))
	case *hot < 0 || *hot > 1:
		fail(fmt.Errorf("-hot %v: must be in [0, 1]", *hot))
	}

	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fail(err)
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}

	// hotEvery: one request in hotEvery goes to the hot key (0: none).
	hotEvery := 0
	if *hot > 0 {
		hotEvery = int(1 / *hot + 0.5)
	}

	start := time.Now()
	measureFrom := start.Add(*warmup)
	end := measureFrom.Add(*duration)
	results := make([]result, *callers)
	var wg sync.WaitGroup
	for c := 0; c < *callers; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			r := &results[c]
			// 1µs to 60s, 3 significant digits.
			r.hist = hdrhistogram.New(1, 60_000_000, 3)
			client := clients[c%len(clients)]
			req := &rlsv3.RateLimitRequest{
				Domain: *domain,
				Descriptors: []*rlsv3common.RateLimitDescriptor{{
					Entries: []*rlsv3common.RateLimitDescriptor_Entry{{Key: "user"}},
				}},
			}
			entry := req.Descriptors[0].Entries[0]
			// Caller c visits keys c, c+callers, c+2*callers, ... so that
			// callers do not walk the same keys in step.
			k := c % *keys
			for i := 0; i < maxCallsPerCaller; i++ {
				if hotEvery > 0 && (i+c)%hotEvery == 0 {
					entry.Value = "hot"
				} else {
					entry.Value = fmt.Sprintf("u%d", k)
					k = (k + *callers) % *keys
				}
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				t1 := time.Now()
				if t0.Before(measureFrom) || t1.After(end) {
					continue
				}
				if err != nil {
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				us := t1.Sub(t0).Microseconds()
				if us < 1 {
					us = 1
				}
				_ = r.hist.RecordValue(us)
				switch resp.GetOverallCode() {
				case rlsv3.RateLimitResponse_OK:
					r.ok++
				case rlsv3.RateLimitResponse_OVER_LIMIT:
					r.over++
				default:
					r.unknown++
				}
			}
		}(c)
	}
	wg.Wait()

	total := hdrhistogram.New(1, 60_000_000, 3)
	var ok, over, unknown, errs int64
	var firstErr error
	for i := range results {
		r := &results[i]
		total.Merge(r.hist)
		ok += r.ok
		over += r.over
		unknown += r.unknown
		errs += r.errors
		if firstErr == nil {
			firstErr = r.firstErr
		}
	}
	decided := ok + over + unknown
	secs := duration.Seconds()
	ms := func(us int64) string { return fmt.Sprintf("%.3fms", float64(us)/1000) }
	fmt.Printf("addr=%s domain=%s callers=%d conns=%d keys=%d hot=%g warmup=%v duration=%v\n",
		*addr, *domain, *callers, *conns, *keys, *hot, *warmup, *duration)
	fmt.Printf("decisions=%d decisions/s=%.0f p50=%s p90=%s p99=%s p999=%s max=%s mean=%.3fms errors=%d ok=%d over_limit=%d other=%d\n",
		decided, float64(decided)/secs,
		ms(total.ValueAtQuantile(50)), ms(total.ValueAtQuantile(90)),
		ms(total.ValueAtQuantile(99)), ms(total.ValueAtQuantile(99.9)),
		ms(total.Max()), total.Mean()/1000, errs, ok, over, unknown)
	if firstErr != nil {
		fmt.Printf("first error: %v\n", firstErr)
	}
}

// checkLoopback refuses any address that is not a loopback IP.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr %q: %v", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: only a loopback IP address is allowed", addr)
	}
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rlsload:", err)
	os.Exit(2)
}
