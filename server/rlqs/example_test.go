package rlqs_test

import (
	"context"
	"fmt"
	"net"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/rlqs"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// Serve Envoy's quota service beside a server's rules, and answer one
// Envoy's first report: alone and with no floor, it gets the whole
// limit, 600 per minute, as a token bucket that holds a second of it.
func Example() {
	d, _ := config.Parse("edge.yaml", []byte(`domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
`))
	cfg, _ := config.New(d)
	store := memstore.New(nil)
	defer store.Close()
	srv, _ := server.New(server.Options{Store: store, Config: cfg})
	// One replica: the shares in memory. Several: a grant.RedisHome on
	// the Redis they all reach.
	svc, _ := rlqs.New(srv, &rlqs.Options{Home: &grant.MemHome{}, Floor: -1})

	g := grpc.NewServer()
	svc.Register(g)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go g.Serve(ln)
	defer g.Stop()
	defer svc.Drain(context.Background())

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	st, _ := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	_ = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, NumRequestsDenied: 1}}})
	resp, _ := st.Recv()
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	fmt.Printf("%d tokens, %d every %ds, for %v\n", tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetSeconds(), qa.GetAssignmentTimeToLive().AsDuration())
	// Output: 10 tokens, 600 every 60s, for 10s
}
