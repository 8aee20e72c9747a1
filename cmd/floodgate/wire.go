package main

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/redisstore"
	"google.golang.org/grpc"
)

// openRedis opens a Redis store that serve owns and closes, with the
// options serve's flags set (DenyCache, Functions).
func openRedis(ctx context.Context, url string, o redisstore.Options) (floodgate.Store, func(), error) {
	s, err := redisstore.Open(ctx, url, &o)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { s.Close() }, nil
}

// envoyService is Envoy's rate limit service over srv; headers says
// whether its answers carry RateLimit response headers.
func envoyService(srv *server.Server, headers bool) *envoyrls.Service {
	return envoyrls.New(srv, &envoyrls.Options{OmitHeaders: !headers})
}

// registerGRPC serves Envoy's rate limit service.
func registerGRPC(g *grpc.Server, rls *envoyrls.Service) {
	rlsv3.RegisterRateLimitServiceServer(g, rls)
}

// httpExtras are the HTTP endpoints of other packages: envoyproxy/ratelimit's
// POST /json.
func httpExtras(rls *envoyrls.Service) map[string]http.Handler {
	return map[string]http.Handler{"POST /json": rls.JSONHandler()}
}
