package envoyrls_test

import (
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// classYAML: requests carry their class in a "priority" entry (as an
// Envoy rate limit action puts it there, from a request header or a
// route's generic_key). The exports rule is sheddable by default and lets
// a request claim up to critical, under reserves of its own; the users
// rule has no priority_max, so a request claiming more than its default
// normal is held to normal.
const classYAML = `
domain: api
priority_key: priority
descriptors:
  - key: upstream
    value: exports
    priority: sheddable
    priority_max: critical
    priority_reserves: {normal: 10, sheddable: 40%}
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra}
  - key: upstream
    value: users
    priority: normal
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
`

// TestEnvoyPriorityOverload decides classes carried in Envoy's protocol:
// three gRPC rate limit services over one store (memory, and a real
// Redis), called with go-control-plane's client stubs as Envoy would, on
// a frozen clock. On the exports rule the classes ask in turn and each is
// admitted exactly when the units taken before it are below its bound
// (60, 90 and 100 of 100: sheddable keeps 40%, normal 10 units); the
// response's current_limit is the rule's and limit_remaining what the
// class may still take. On the users rule every request claims critical
// but is held to normal: admitted until 95 of 100, never beyond.
func TestEnvoyPriorityOverload(t *testing.T) {
	for _, storeName := range []string{"memory", "redis"} {
		t.Run(storeName, func(t *testing.T) {
			var store floodgate.Store
			if storeName == "memory" {
				m := memstore.New(&memstore.Options{SweepInterval: -1})
				t.Cleanup(func() { m.Close() })
				store = m
			} else {
				store = openRedis(t, "redis://"+redistest.Standalone(t).Addr)
			}
			clock := floodgatetest.NewFakeClock(start)
			var clients []rlsv3.RateLimitServiceClient
			for range 3 {
				srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, classYAML), Limiter: floodgate.Options{Clock: clock, Timeout: time.Minute}})
				if err != nil {
					t.Fatal(err)
				}
				g := grpc.NewServer()
				envoyrls.Register(g, srv)
				lis, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go g.Serve(lis)
				t.Cleanup(g.Stop)
				conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
			}
			ask := func(i int, d *commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
				resp, err := clients[i%3].ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{d}})
				if err != nil {
					t.Fatalf("ShouldRateLimit: %v", err)
				}
				return resp.GetStatuses()[0]
			}

			classes := []floodgate.Priority{floodgate.Sheddable, floodgate.Normal, floodgate.Critical}
			bound := map[floodgate.Priority]int{floodgate.Sheddable: 60, floodgate.Normal: 90, floodgate.Critical: 100}
			taken, refused := 0, map[floodgate.Priority]int{}
			admitted := map[floodgate.Priority]int{}
			for i := 0; len(refused) < 3 && i < 1000; i++ {
				p := classes[i%3]
				d := desc("upstream", "exports", "priority", string(p))
				if i%2 == 1 {
					d = desc("priority", string(p), "upstream", "exports")
				}
				st := ask(i, d)
				ok := st.GetCode() == rlsv3.RateLimitResponse_OK
				if ok != (taken < bound[p]) {
					t.Fatalf("%s with %d of 100 taken: admitted %v, want %v", p, taken, ok, !ok)
				}
				if lim := st.GetCurrentLimit(); lim.GetRequestsPerUnit() != 100 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
					t.Fatalf("current_limit %v, want the rule's 100 per minute", lim)
				}
				if ok {
					taken++
					admitted[p]++
					if want := uint32(bound[p] - taken); st.GetLimitRemaining() != want {
						t.Fatalf("%s after %d taken: limit_remaining %d, want %d", p, taken, st.GetLimitRemaining(), want)
					}
				} else if _, seen := refused[p]; !seen {
					refused[p] = taken
				}
			}
			t.Logf("exports: admitted %v; first refusals at %v", admitted, refused)
			if taken != 100 || refused[floodgate.Sheddable] != 60 || refused[floodgate.Normal] != 90 || refused[floodgate.Critical] != 100 {
				t.Errorf("exports: %d of 100 taken, first refusals %v; want 100, and 60, 90, 100", taken, refused)
			}

			n := 0
			for i := range 200 {
				if ask(i, desc("upstream", "users", "priority", "critical")).GetCode() != rlsv3.RateLimitResponse_OK {
					break
				}
				n++
			}
			if n != 95 {
				t.Errorf("users claiming critical: %d admitted of 100, want 95 (held to the rule's normal)", n)
			}
			t.Logf("users claiming critical, held to normal: %d admitted of 100", n)
		})
	}
}

// BenchmarkServiceClass is BenchmarkService with the class carried in a
// priority_key entry, on a rule with reserves of its own (classYAML's
// exports rule, sheddable by default, up to critical): what taking the
// entry off and holding the class to the rule's ceiling add to a
// decision. Every request asks the rule's one key with cost 0 (the
// descriptor's hits_addend), so that the frozen clock never exhausts it
// and every decision is admitted.
func BenchmarkServiceClass(b *testing.B) {
	m := memstore.New(&memstore.Options{SweepInterval: -1})
	b.Cleanup(func() { m.Close() })
	srv, err := server.New(server.Options{Store: m, Config: parseConfig(b, classYAML), Limiter: floodgate.Options{Clock: floodgatetest.NewFakeClock(start), Timeout: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	svc := envoyrls.New(srv, nil)
	for _, tc := range []struct {
		name string
		d    *commonv3.RateLimitDescriptor
	}{
		{"no class entry", desc("upstream", "exports")},
		{"class entry", desc("upstream", "exports", "priority", "critical")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{tc.d}, HitsAddend: 0}
			tc.d.HitsAddend = wrapperspb.UInt64(0)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := svc.ShouldRateLimit(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatalf("denied: %v", resp)
				}
			}
		})
	}
}
