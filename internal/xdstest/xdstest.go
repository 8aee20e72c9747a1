// Package xdstest runs go-control-plane's own xDS server and snapshot
// cache on a loopback port for tests, recording every request its
// streams receive and the metadata each stream opened with. It is the
// management server the xDS client (config/xds) and `floodgate serve
// -config-xds` are tried against: code that imports nothing of ours on
// the other side of the wire.
package xdstest

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachetypes "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Never bounds a wait for something that must happen; reaching it fails
// the test (it is not a measure of speed).
const Never = time.Minute

// Server is an aggregated discovery server serving RateLimitConfig
// snapshots. Its methods are safe for concurrent use with the streams it
// serves.
type Server struct {
	t     testing.TB
	creds credentials.TransportCredentials
	grpc  *grpc.Server
	cache cachev3.SnapshotCache

	// Addr is the host:port the server listens on.
	Addr string

	mu      sync.Mutex
	reqs    []*discoveryv3.DiscoveryRequest
	md      []metadata.MD
	changed chan struct{}
}

// Start serves on a new port of 127.0.0.1 until the test ends; creds nil
// serves plaintext.
func Start(t testing.TB, creds credentials.TransportCredentials) *Server {
	t.Helper()
	s := &Server{t: t, creds: creds, changed: make(chan struct{}, 1)}
	s.Restart("127.0.0.1:0")
	return s
}

// Restart serves on addr with a new, empty snapshot cache, as a
// restarted management server does: it forgets every snapshot. The
// requests recorded so far are kept.
func (s *Server) Restart(addr string) {
	s.t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	s.cache = cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.md = append(s.md, md)
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			s.reqs = append(s.reqs, req)
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
			return nil
		},
	}
	var opts []grpc.ServerOption
	if s.creds != nil {
		opts = append(opts, grpc.Creds(s.creds))
	}
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), s.cache, cb))
	s.grpc = g
	go g.Serve(ln)
	s.t.Cleanup(g.Stop)
}

// Stop ends the server and every stream it serves.
func (s *Server) Stop() { s.grpc.Stop() }

// Push sets node's snapshot to version with resources.
func (s *Server) Push(node, version string, resources ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	rs := make([]cachetypes.Resource, len(resources))
	for i, r := range resources {
		rs[i] = r
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]cachetypes.Resource{resourcev3.RateLimitConfigType: rs})
	if err == nil {
		err = s.cache.SetSnapshot(context.Background(), node, snap)
	}
	if err != nil {
		s.t.Fatal(err)
	}
}

// Wait returns the first request from index from on that ok accepts, and
// the index after it; it fails the test if none comes within Never.
func (s *Server) Wait(from int, what string, ok func(*discoveryv3.DiscoveryRequest) bool) (*discoveryv3.DiscoveryRequest, int) {
	s.t.Helper()
	deadline := time.After(Never)
	for {
		reqs := s.Requests()
		for i := from; i < len(reqs); i++ {
			if ok(reqs[i]) {
				return reqs[i], i + 1
			}
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("no %s among the %d requests the xDS server received", what, len(reqs))
		}
	}
}

// Requests is every request received so far, in order.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Streams is the metadata of every stream opened so far, in order.
func (s *Server) Streams() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.md)
}

// ACK accepts a request acknowledging version.
func ACK(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetResponseNonce() != "" && r.GetErrorDetail() == nil && r.GetVersionInfo() == version
	}
}

// NACK accepts a request refusing a push.
func NACK(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil }
