package envoyrls_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const tenantYAML = `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestAllOrNothing is the service check of the reservations issue: with a
// tenant limit of 5 per minute and a user limit of 1, three requests the
// user's limit denies leave the tenant's budget alone, so 4 of 5 other
// users get through, over Envoy's gRPC and over the HTTP API alike. With
// IndependentDescriptors (upstream's counting), the denied requests spend
// the tenant's budget and only 1 of the 5 gets through.
func TestAllOrNothing(t *testing.T) {
	// One server and one Cluster for every case, each case on keys of
	// its own prefix.
	standalone := sync.OnceValue(func() *redistest.Server { return redistest.Standalone(t) })
	cluster := sync.OnceValue(func() *redistest.Cluster { return redistest.StartCluster(t) })
	stores := map[string]func(t *testing.T) floodgate.Store{
		"memory": func(t *testing.T) floodgate.Store {
			store := memstore.New(&memstore.Options{SweepInterval: -1})
			t.Cleanup(func() { store.Close() })
			return store
		},
		// The tenant's and the user's keys fall in different slots of a
		// Cluster: all or nothing there is a run per slot, and a
		// compensation when one denies.
		"redis": func(t *testing.T) floodgate.Store { return openRedis(t, "redis://"+standalone().Addr) },
		"redis-cluster": func(t *testing.T) floodgate.Store {
			return openRedis(t, "redis-cluster://"+strings.Join(cluster().Addrs(), ","))
		},
	}
	for _, tc := range []struct {
		store       string
		independent bool
		want        int
	}{{"memory", false, 4}, {"memory", true, 1}, {"redis", false, 4}, {"redis-cluster", false, 4}, {"redis-cluster", true, 1}} {
		for _, proto := range []string{"grpc", "http"} {
			t.Run(fmt.Sprintf("%s/%s/independent=%v", tc.store, proto, tc.independent), func(t *testing.T) {
				store := stores[tc.store](t)
				srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, tenantYAML),
					// A deadline far above the server's default 10 ms: on a
					// loaded host a Cluster call can take longer, and its
					// failure would be answered fail_open, which admits.
					Limiter: floodgate.Options{Clock: floodgatetest.NewFakeClock(start), Timeout: 5 * time.Second}, IndependentDescriptors: tc.independent})
				if err != nil {
					t.Fatal(err)
				}
				allowed := allowVia(t, proto, srv)
				if !allowed("u0") {
					t.Fatal("the user's first request was denied")
				}
				for i := range 3 {
					if allowed("u0") {
						t.Fatalf("the user's request %d was admitted over 1 per minute", i+2)
					}
				}
				n := 0
				for i := 1; i <= 5; i++ {
					if allowed(fmt.Sprintf("u%d", i)) {
						n++
					}
				}
				if n != tc.want {
					t.Errorf("%d of 5 other users admitted, want %d", n, tc.want)
				}
			})
		}
	}
}

// openRedis opens a Redis store on url (a fresh prefix per test, so tests
// can share a server), closed when the test ends.
func openRedis(t *testing.T, url string) floodgate.Store {
	t.Helper()
	s, err := redisstore.Open(t.Context(), url, &redisstore.Options{Prefix: fmt.Sprintf("aon%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// allowVia returns a function that sends one request of user to srv over
// proto and reports whether it was admitted.
func allowVia(t *testing.T, proto string, srv *server.Server) func(user string) bool {
	if proto == "http" {
		h := servertest.Handler(t, srv, nil)
		return func(user string) bool {
			body, _ := json.Marshal(map[string]any{"domain": "api", "descriptors": []any{
				map[string]any{"entries": []any{map[string]string{"key": "tenant", "value": "t1"}}},
				map[string]any{"entries": []any{map[string]string{"key": "tenant", "value": "t1"}, map[string]string{"key": "user", "value": user}}},
			}})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/allow", bytes.NewReader(body)))
			var out struct{ Allowed bool }
			if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
				t.Fatalf("POST /v1/allow: %d %s", rec.Code, rec.Body)
			}
			return out.Allowed
		}
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
	client := rlsv3.NewRateLimitServiceClient(conn)
	return func(user string) bool {
		resp, err := client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{
			desc("tenant", "t1"), desc("tenant", "t1", "user", user)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
	}
}
