package envoyrls_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// exampleServer is a server with one rule, 2 per minute per client
// address, on the memory store, its clock stopped 15 s into a minute.
func exampleServer() *server.Server {
	d, err := config.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 2
`))
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(server.Options{
		Store:  memstore.New(nil),
		Config: cfg,
		Limiter: floodgate.Options{
			Clock: floodgatetest.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 15, 0, time.UTC)),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	return srv
}

// Envoy's rate_limit_service points at a gRPC server with the service
// registered; here a client built from the same protos plays Envoy.
func ExampleRegister() {
	srv := exampleServer()
	g := grpc.NewServer()
	envoyrls.Register(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		fmt.Printf("%s: %d per %s, %d left, reset in %v\n", resp.GetOverallCode(),
			st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(),
			st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
	}
	// Output:
	// OK: 2 per MINUTE, 1 left, reset in 45s
	// OK: 2 per MINUTE, 0 left, reset in 45s
	// OVER_LIMIT: 2 per MINUTE, 0 left, reset in 45s
}

// Clients that cannot speak gRPC post the same request as JSON to /json.
func ExampleJSONHandler() {
	srv := exampleServer()
	api, err := httpapi.New(srv, nil)
	if err != nil {
		log.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler(map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)}))
	defer hs.Close()

	const body = `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for range 3 {
		resp, err := http.Post(hs.URL+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Printf("%s RateLimit: %s Retry-After: %q\n", resp.Status, resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"))
	}
	// Output:
	// 200 OK RateLimit: "per_ip";r=1;t=45 Retry-After: ""
	// 200 OK RateLimit: "per_ip";r=0;t=45 Retry-After: ""
	// 429 Too Many Requests RateLimit: "per_ip";r=0;t=45 Retry-After: "45"
}
