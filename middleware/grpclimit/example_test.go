package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/middleware/grpclimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// Limit each client address to 2 calls per minute on a real server, and
// read the wait from the RetryInfo detail of the denial.
func Example() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	lim, err := grpclimit.New(grpclimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Limit: 2, Period: time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		st := status.Convert(err)
		fmt.Println(st.Code())
		for _, d := range st.Details() {
			if retry, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", retry.RetryDelay.AsDuration())
			}
		}
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
	// retry in 1m0s
}

// Key calls by an API key in the metadata, stored hashed; a call without
// one is refused.
func ExampleMetadata() {
	key := grpclimit.Metadata("x-api-key")
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "sk_live_123"))
	fmt.Println(key(ctx, "/pkg.Service/Method")[:27] + "…")
	fmt.Printf("%q\n", key(context.Background(), "/pkg.Service/Method"))
	// Output:
	// metadata:x-api-key:46e8faff…
	// ""
}

// Status is the error of a denied call, for a custom Deny or for code that
// checks limits itself with Limiter.Check.
func ExampleStatus() {
	res := grpclimit.Result{
		Limits:    []floodgate.Limit{{Name: "per-second", Limit: 10, Period: time.Second}},
		Decision:  floodgate.Decision{Limit: 10, RetryAfter: 250 * time.Millisecond},
		Decisions: []floodgate.Decision{{Limit: 10, RetryAfter: 250 * time.Millisecond}},
	}
	st := grpclimit.Status(res)
	fmt.Println(st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			fmt.Println("RetryInfo", d.RetryDelay.AsDuration())
		case *errdetails.QuotaFailure:
			fmt.Println("QuotaFailure", d.Violations[0].Subject, d.Violations[0].Description)
		}
	}
	// Output:
	// ResourceExhausted grpclimit: rate limit exceeded; retry after 250ms
	// RetryInfo 250ms
	// QuotaFailure policy:per-second at most 10 per 1s
}

// Wait for a slot instead of failing a call, and give a call's class
// from its metadata: two interceptors, each checked here with Check as a
// call would be.
func ExampleConfig_maxWait() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	lim, err := grpclimit.New(grpclimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 20, Period: time.Second, Burst: 1}},
		Key:     func(context.Context, string) string { return "worker" },
		// Bounded by the call's deadline too: a call whose context ends
		// first fails DeadlineExceeded, and its slot is given back.
		MaxWait: 100 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 4 {
		res := lim.Check(context.Background(), "/pkg.Service/Method")
		fmt.Println(res.Decision.Allowed, res.Waited)
	}
	// Output:
	// true 0s
	// true 50ms
	// true 100ms
	// false 0s
}

// Keep the last part of a budget for critical calls: sheddable calls stop
// at 8 of 10 per minute.
func ExampleConfig_priority() {
	limiter, _ := floodgate.New(memstore.New(nil), &floodgate.Options{Clock: floodgatetest.NewFakeClock(start)})
	lim, err := grpclimit.New(grpclimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}},
		Key:     func(context.Context, string) string { return "upstream" },
		Priority: func(ctx context.Context, _ string) floodgate.Priority {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-priority"); len(v) > 0 && v[0] == "critical" {
				return floodgate.Critical
			}
			return floodgate.Sheddable
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	count := func(ctx context.Context) (n int) {
		for range 20 {
			if !lim.Check(ctx, "/pkg.Service/Method").Decision.Allowed {
				return n
			}
			n++
		}
		return n
	}
	fmt.Println("sheddable:", count(context.Background()))
	fmt.Println("critical:", count(metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-priority", "critical"))))
	// Output:
	// sheddable: 8
	// critical: 2
}
