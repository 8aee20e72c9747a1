package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck/limitchecktest"
	"github.com/floodgate-rl/floodgate/middleware/grpclimit"
)

// counted is a health server that counts the calls it answers.
type counted struct {
	*health.Server
	calls atomic.Int64
}

func (c *counted) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	c.calls.Add(1)
	return c.Server.Check(ctx, r)
}

// serveWaiting is serve with the interceptor's waits on a limitchecktest.Timer.
func serveWaiting(t *testing.T, c grpclimit.Config) (healthpb.HealthClient, *limitchecktest.Timer, *counted) {
	t.Helper()
	lim, err := grpclimit.New(c)
	if err != nil {
		t.Fatal(err)
	}
	timer := limitchecktest.NewTimer()
	grpclimit.SetWaitTimer(lim, timer.After)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()))
	hs := &counted{Server: health.NewServer()}
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn), timer, hs
}

// TestWait: with MaxWait, over a real gRPC server on loopback, a call
// that finds no unit free waits for its slot and then runs; a call whose
// context ends while it waits fails with its context's status and gives
// its slot back, exactly once (the next call waits for that same slot);
// a call with no slot within MaxWait fails ResourceExhausted at once.
func TestWait(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	client, timer, hs := serveWaiting(t, grpclimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 1, Period: time.Second, Burst: 1}},
		Key:     func(context.Context, string) string { return "worker" },
		MaxWait: 2 * time.Second,
	})
	if err := check(t.Context(), client); err != nil {
		t.Fatalf("first: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- check(t.Context(), client) }()
	if d := timer.Next(t); d < time.Second || d > time.Second+2*time.Microsecond {
		t.Fatalf("waits %v, want its slot 1 s ahead", d)
	}
	if hs.calls.Load() != 1 {
		t.Fatal("ran before its slot")
	}
	timer.Fire <- start
	if err := <-done; err != nil || hs.calls.Load() != 2 {
		t.Fatalf("after its slot: %v, %d calls", err, hs.calls.Load())
	}
	<-timer.Stopped // that wait's end

	ctx, cancel := context.WithCancel(t.Context())
	go func() { done <- check(ctx, client) }()
	if d := timer.Next(t); d < 2*time.Second {
		t.Fatalf("waits %v, want 2 s", d)
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled call: %v, want Canceled", err)
	}
	<-timer.Stopped // the wait ended, its slot given back
	go func() { done <- check(t.Context(), client) }()
	if d := timer.Next(t); d < 2*time.Second || d > 2*time.Second+2*time.Microsecond {
		t.Fatalf("after a slot was given back: waits %v, want that slot, 2 s ahead", d)
	}
	timer.Fire <- start
	if err := <-done; err != nil || hs.calls.Load() != 3 {
		t.Fatalf("the slot given back: %v, %d calls", err, hs.calls.Load())
	}
	if err := check(t.Context(), client); status.Code(err) != codes.ResourceExhausted || hs.calls.Load() != 3 {
		t.Fatalf("beyond MaxWait: %v, want ResourceExhausted", err)
	}
}

// TestPriority: with Priority from the call's metadata, sheddable calls
// stop at 8 of 10 (2 kept), critical ones take the budget to its end.
func TestPriority(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	client := serve(t, grpclimit.Config{
		Limiter: limiter,
		Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 10, Period: time.Minute}},
		Key:     func(context.Context, string) string { return "upstream" },
		Priority: func(ctx context.Context, _ string) floodgate.Priority {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-class"); len(v) > 0 {
				return floodgate.Priority(v[0])
			}
			return ""
		},
	})
	as := func(class string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-class", class)
	}
	admitted := map[string]int{}
	for _, class := range []string{"sheddable", "critical"} {
		for range 20 {
			if err := check(as(class), client); err != nil {
				if status.Code(err) != codes.ResourceExhausted {
					t.Fatalf("%s: %v", class, err)
				}
				break
			}
			admitted[class]++
		}
	}
	if admitted["sheddable"] != 8 || admitted["critical"] != 2 {
		t.Errorf("admitted %v, want sheddable 8 (2 of 10 kept), then critical 2", admitted)
	}
	if err := check(as("urgent"), client); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown class: %v, want InvalidArgument", err)
	}
}
