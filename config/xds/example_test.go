package xds_test

import (
	"context"
	"fmt"
	"net"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/config/xds"
)

// Run subscribes to a management server (here go-control-plane's own, in
// process) and hands each push to Apply; serve's Apply swaps the config
// into its server.
func ExampleRun() {
	// A management server with one RateLimitConfig for node "edge-1".
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	snap, _ := cachev3.NewSnapshot("v1", map[resourcev3.Type][]cachetypes.Resource{
		resourcev3.RateLimitConfigType: {&rlsconfv3.RateLimitConfig{
			Name:   "rl-edge",
			Domain: "edge",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key:       "remote_address",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 60},
			}},
		}},
	})
	_ = cache.SetSnapshot(context.Background(), "edge-1", snap)
	g := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), cache, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go g.Serve(ln)
	defer g.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan *config.Config, 1)
	go xds.Run(ctx, xds.Options{
		Address: ln.Addr().String(),
		NodeID:  "edge-1",
		Apply: func(cfg *config.Config) error {
			applied <- cfg
			return nil
		},
	})
	cfg := <-applied
	for _, r := range cfg.Domain("edge").Rules() {
		fmt.Printf("%s (from %s): %v\n", r.ID, r.File, r.Limit)
	}
	// Output:
	// edge|remote_address (from rl-edge): 60/1m0s fixed_window
}
