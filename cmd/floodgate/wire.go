package main

import (
	"context"
	"log/slog"
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

// openPending is the Redis store of a serve that started while Redis was
// unreachable (redisstore.Pending), first the error of the attempt that
// just failed; log hears of the connection, and once of each error that
// waiting will not cure (a Redis that now answers but refuses the
// password, or a certificate), which /readyz and every failed decision
// report too.
func openPending(url string, o redisstore.Options, first error, log *slog.Logger) *redisstore.Pending {
	var logged string // read and written by the tries' goroutine only
	return redisstore.OpenPending(url, &o, first, &redisstore.PendingOptions{
		OnError: func(err error) {
			if msg := err.Error(); !redisstore.Retryable(err) && msg != logged {
				logged = msg
				log.Error("store reachable but not opened; still retrying", "store", redactURL(url), "every", redisstore.DefaultRetryEvery, "error", msg)
			}
		},
		OnOpen: func() { log.Info("store connected", "store", redactURL(url)) },
	})
}

// envoyService is Envoy's rate limit service over srv; headers says
// whether its answers carry response headers, p which ones, and whether
// dynamic metadata.
func envoyService(srv *server.Server, headers bool, p parityFlags) *envoyrls.Service {
	return envoyrls.New(srv, p.envoyOptions(headers))
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
