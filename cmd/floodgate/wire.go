package main

import (
	"context"
	"net/http"

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

// registerGRPC serves Envoy's rate limit service.
func registerGRPC(g *grpc.Server, srv *server.Server) { envoyrls.Register(g, srv) }

// httpExtras are the HTTP endpoints of other packages: envoyproxy/ratelimit's
// POST /json.
func httpExtras(srv *server.Server) map[string]http.Handler {
	return map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)}
}
