// Command noopserver is the floor of a rate limit service: a grpc-go
// server of Envoy's rate limit protocol (envoy.service.ratelimit.v3) that
// answers every ShouldRateLimit with OK, and a net/http server whose POST
// /v1/allow answers a constant allowed decision in the shape of floodgate's
// HTTP API, neither deciding anything. benchall loads it exactly as it
// loads `floodgate serve`, so that each service row can be read as a ratio
// of what the RPC (or the HTTP request) alone costs on this machine.
//
//	noopserver -grpc 127.0.0.1:0 -http 127.0.0.1:0
//
// It prints "noopserver: grpc ADDR http ADDR" on stdout once both listen,
// and serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// okService answers every request OK, with one OK status per descriptor,
// as a service that decides would.
type okService struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okService) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

// allowBody is an allowed decision as floodgate's POST /v1/allow answers it.
const allowBody = `{"allowed":true,"code":"OK","limit":1000000000,"remaining":999999999,"reset_after_ms":1000,"retry_after_ms":0}` + "\n"

func allow(w http.ResponseWriter, r *http.Request) {
	// Read the body as a handler that decodes it would.
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, allowBody)
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC `address`")
	httpAddr := flag.String("http", "127.0.0.1:0", "HTTP `address`")
	flag.Parse()
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noopserver:", err)
		os.Exit(1)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noopserver:", err)
		os.Exit(1)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, okService{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/allow", allow)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	hs := &http.Server{Handler: mux}
	go gs.Serve(gl)
	go hs.Serve(hl)
	fmt.Printf("noopserver: grpc %s http %s\n", gl.Addr(), hl.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	gs.Stop()
	hs.Close()
}
