package transport

import (
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// Listen listens on the TCP address addr and holds at most maxConns
// connections open at once: more wait in the kernel's accept queue
// until one closes, so that a client that opens thousands cannot take
// every file descriptor. With files (nil: none), the listener speaks TLS
// and negotiates protos by ALPN ("h2" and "http/1.1" for HTTP); a gRPC
// listener takes its TLS from GRPCServerOptions instead, so give it nil.
func Listen(addr string, maxConns int, files *TLSFiles, protos ...string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ln = netutil.LimitListener(ln, maxConns)
	if files != nil {
		ln = tls.NewListener(ln, files.Config(protos...))
	}
	return ln, nil
}

// NewHTTPServer is an http.Server of h whose requests must arrive in
// time: the header within 5 s, the whole request within 30 s; a
// connection idle for 2 minutes is closed. errorLog receives the
// server's own errors (a TLS handshake that failed, say).
func NewHTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          errorLog,
	}
}

// grpcStreamWorkers is the number of goroutines kept to serve gRPC calls
// (grpc.NumStreamWorkers). A pool of workers serves each call on a
// goroutine whose stack has already grown, where a goroutine per call
// (gRPC's default) grows and copies a new stack for every call; calls
// beyond the pool's size still get a goroutine of their own, so the pool
// bounds nothing.
const grpcStreamWorkers = 256

// GRPCServerOptions bound what one client can hold on a gRPC listener: a
// connection idle for maxIdle is closed (GOAWAY), every connection is
// recycled after a day so that none lives for ever, and a client that
// pings more often than every 10 s is disconnected, as gRPC's keepalive
// enforcement does, rather than holding the connection open with pings
// alone. With files (nil: none), the listener speaks TLS ("h2").
func GRPCServerOptions(maxIdle time.Duration, files *TLSFiles) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(grpcStreamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     maxIdle,
			MaxConnectionAge:      24 * time.Hour,
			MaxConnectionAgeGrace: 10 * time.Second,
			Time:                  2 * time.Minute,
			Timeout:               20 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if files != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(files.Config("h2"))))
	}
	return opts
}

// DebugHandler serves Go's profiler at /debug/pprof/. Serve it on a
// listener of its own, on loopback (`floodgate serve -debug-addr`), never
// on the API's: /debug/pprof/cmdline reveals the command line, secrets in
// flags included, and a profile costs the process CPU.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
