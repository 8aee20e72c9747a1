package envoyrls_test

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/server/envoyrls"
)

// BenchmarkShouldRateLimit calls ShouldRateLimit through a real gRPC
// connection on loopback, from 8 goroutines per processor, on the memory store:
// the cost of the protocol and the translation around a decision. Each
// goroutine asks for its own client addresses, so that the store's keys are
// spread as real traffic spreads them, and every decision is admitted (3 per
// minute per address, one call per address and minute: the fake clock never
// moves, so each address is asked once). Allocations are those of client and
// server together, both in this process.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("descriptors=%d", n), func(b *testing.B) {
			f := serve(b, nil, nil)
			var next atomic.Int64
			b.ReportAllocs()
			// Many calls in flight, as from a fleet of Envoys: one per
			// processor would measure the loopback's latency, not the server.
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1)
				ctx := b.Context()
				i := 0
				for pb.Next() {
					i++
					ds := make([]*commonv3.RateLimitDescriptor, n)
					for j := range ds {
						ds[j] = desc("remote_address", strconv.FormatInt(g, 10)+"."+strconv.Itoa(i)+"."+strconv.Itoa(j))
					}
					resp, err := f.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
					if err != nil {
						b.Fatal(err)
					}
					if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
						b.Fatalf("denied: %v", resp)
					}
				}
			})
		})
	}
}

// BenchmarkService calls the Service directly, without gRPC, on the memory
// store, with one descriptor per request, a new address each time (every
// decision admitted, as in benchall's gRPC rows): the
// translation, the decision and the response, with its header fields, per
// request, and nothing of the protocol.
func BenchmarkService(b *testing.B) {
	srv, _ := newServer(b, nil)
	svc := envoyrls.New(srv, nil)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "")}}
	ctx := b.Context()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req.Descriptors[0].Entries[0].Value = strconv.Itoa(i)
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
