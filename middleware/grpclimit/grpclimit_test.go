package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/middleware/grpclimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newLimiter(t testing.TB, store floodgate.Store, policy floodgate.FailurePolicy) (*floodgate.Limiter, *floodgatetest.FakeClock) {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	l, err := floodgate.New(store, &floodgate.Options{Clock: clock, FailurePolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func memStore(t testing.TB) *memstore.Store {
	s := memstore.New(&memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// serve starts a gRPC server with the health service behind the
// interceptors of c on 127.0.0.1, and returns a client connected to it.
func serve(t testing.TB, c grpclimit.Config) healthpb.HealthClient {
	t.Helper()
	lim, err := grpclimit.New(c)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(ctx context.Context, c healthpb.HealthClient, opts ...grpc.CallOption) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
	return err
}

func TestUnary(t *testing.T) {
	t.Parallel()
	limiter, clock := newLimiter(t, memStore(t), "")
	clock.Advance(15*time.Second + 250*time.Millisecond)
	c := serve(t, grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Name: "per-minute", Limit: 2, Period: time.Minute}}, SendFields: true})
	ctx := t.Context()
	for i := range 2 {
		var md metadata.MD
		if err := check(ctx, c, grpc.Header(&md)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got, want := md.Get("ratelimit-policy"), []string{`"per-minute";q=2;w=60`}; len(got) != 1 || got[0] != want[0] {
			t.Errorf("call %d: ratelimit-policy %q, want %q", i, got, want)
		}
	}
	var md metadata.MD
	err := check(ctx, c, grpc.Header(&md))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	if !strings.Contains(st.Message(), "retry after 44.75s") {
		t.Errorf("message %q", st.Message())
	}
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() != 44750*time.Millisecond {
		t.Errorf("RetryInfo %v, want a delay of 44.75s", retry)
	}
	if quota == nil || len(quota.Violations) != 1 || quota.Violations[0].Subject != "policy:per-minute" || quota.Violations[0].Description != "at most 2 per 1m0s" {
		t.Errorf("QuotaFailure %v", quota)
	}
	if got := md.Get("ratelimit"); len(got) != 1 || got[0] != `"per-minute";r=0;t=45` {
		t.Errorf("ratelimit %q", got)
	}
	if got := md.Get("retry-after"); len(got) != 1 || got[0] != "45" {
		t.Errorf("retry-after %q", got)
	}
	clock.Advance(45 * time.Second)
	if err := check(ctx, c); err != nil {
		t.Errorf("next window: %v", err)
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	c := serve(t, grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 1, Period: time.Minute}}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	second, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	// The first stream is not charged per message; it is still open.
	if err := check(ctx, c); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("unary after two streams: %v, want ResourceExhausted", err)
	}
}

type downStore struct{}

func (downStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: store down", floodgate.ErrStore)
}

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{{Limit: 1, Period: time.Second}}
	open, _ := newLimiter(t, downStore{}, floodgate.FailOpen)
	if err := check(t.Context(), serve(t, grpclimit.Config{Limiter: open, Limits: limits})); err != nil {
		t.Errorf("fail open: %v", err)
	}
	closed, _ := newLimiter(t, downStore{}, floodgate.FailClosed)
	err := check(t.Context(), serve(t, grpclimit.Config{Limiter: closed, Limits: limits}))
	if st := status.Convert(err); st.Code() != codes.Unavailable || strings.Contains(st.Message(), "store down") {
		t.Errorf("fail closed: %v, want Unavailable without the store's error", err)
	}
	dry := serve(t, grpclimit.Config{Limiter: closed, Limits: limits, DryRun: true})
	if err := check(t.Context(), dry); err != nil {
		t.Errorf("fail closed in a dry run: %v", err)
	}
	// Local: 4 per second over 2 instances is 2 each, decided in memory;
	// the third call is a denial like any other, not Unavailable.
	local, err := floodgate.New(downStore{}, &floodgate.Options{
		Clock: floodgatetest.NewFakeClock(start), FailurePolicy: floodgate.FailLocal, Local: memStore(t), Instances: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := serve(t, grpclimit.Config{Limiter: local, Limits: []floodgate.Limit{{Limit: 4, Period: time.Second}}})
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if err := check(t.Context(), c); status.Code(err) != want {
			t.Errorf("local, call %d: %v, want %v", i, err, want)
		}
	}
}

func TestMetadataKey(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	var keys []string
	c := serve(t, grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 1, Period: time.Minute}}, Key: grpclimit.Metadata("X-Api-Key"),
		Report: func(_ context.Context, _ string, res grpclimit.Result) { keys = append(keys, res.Key) }})
	ctx := t.Context()
	if err := check(ctx, c); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no key: %v, want InvalidArgument", err)
	}
	alice := metadata.AppendToOutgoingContext(ctx, "x-api-key", "alice-secret")
	bob := metadata.AppendToOutgoingContext(ctx, "x-api-key", "bob-secret")
	if err := check(alice, c); err != nil {
		t.Errorf("alice: %v", err)
	}
	if err := check(bob, c); err != nil {
		t.Errorf("bob: %v", err)
	}
	if err := check(alice, c); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("alice again: %v, want ResourceExhausted", err)
	}
	for _, k := range keys {
		if strings.Contains(k, "secret") {
			t.Errorf("key %q holds the secret", k)
		}
	}
	if len(keys) != 4 || keys[0] != "" || !strings.HasPrefix(keys[1], "metadata:x-api-key:") || keys[1] == keys[2] || keys[1] != keys[3] {
		t.Errorf("keys %q", keys)
	}
}

func TestMissingKeyChoices(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{{Limit: 1, Period: time.Minute}}
	key := grpclimit.Metadata("x-api-key")
	limiter, _ := newLimiter(t, memStore(t), "")
	allow := serve(t, grpclimit.Config{Limiter: limiter, Limits: limits, Key: key, MissingKey: grpclimit.AllowMissingKey})
	for range 3 {
		if err := check(t.Context(), allow); err != nil {
			t.Fatalf("allowed without a key: %v", err)
		}
	}
	shared := serve(t, grpclimit.Config{Limiter: limiter, Limits: limits, Key: key, MissingKey: grpclimit.SharedMissingKey})
	if err := check(t.Context(), shared); err != nil {
		t.Fatalf("first anonymous: %v", err)
	}
	if err := check(t.Context(), shared); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second anonymous: %v, want ResourceExhausted", err)
	}
}

func TestSkipAndDryRun(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	limits := []floodgate.Limit{{Limit: 0, Period: time.Minute}}
	skip := serve(t, grpclimit.Config{Limiter: limiter, Limits: limits,
		Skip: func(_ context.Context, method string) bool { return method == "/grpc.health.v1.Health/Check" }})
	if err := check(t.Context(), skip); err != nil {
		t.Errorf("skipped: %v", err)
	}
	var dryRuns int
	dry := serve(t, grpclimit.Config{Limiter: limiter, Limits: limits, DryRun: true, SendFields: true,
		Report: func(_ context.Context, _ string, res grpclimit.Result) {
			if res.DryRun {
				dryRuns++
			}
		}})
	var md metadata.MD
	if err := check(t.Context(), dry, grpc.Header(&md)); err != nil {
		t.Errorf("dry run: %v", err)
	}
	if dryRuns != 1 || len(md.Get("retry-after")) != 0 || len(md.Get("ratelimit")) != 1 {
		t.Errorf("dry run: %d reported, metadata %v", dryRuns, md)
	}
	never := serve(t, grpclimit.Config{Limiter: limiter, Limits: limits})
	st := status.Convert(check(t.Context(), never))
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "never") {
		t.Errorf("limit 0: %v, want ResourceExhausted, never", st)
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			t.Errorf("limit 0: RetryInfo %v for a call that can never pass", d)
		}
	}
}

// The handler reads the Result from its context; called here directly,
// without a server.
func TestFromContext(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	lim, err := grpclimit.New(grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 5, Period: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(t.Context(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::5"), Port: 443}})
	var got grpclimit.Result
	_, err = lim.UnaryServerInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"}, func(ctx context.Context, _ any) (any, error) {
		got, _ = grpclimit.FromContext(ctx)
		return nil, nil
	})
	if err != nil || got.Key != "ip:2001:db8:1:2::/64" || got.Decision.Remaining != 4 {
		t.Errorf("err %v, result %+v", err, got)
	}
}

func TestPeerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr net.Addr
		p    grpclimit.Peer
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1}, grpclimit.Peer{}, "ip:203.0.113.7"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:203.0.113.7"), Port: 1}, grpclimit.Peer{}, "ip:203.0.113.7"},
		{&net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1}, grpclimit.Peer{IPv4Prefix: 24}, "ip:203.0.113.0/24"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::5"), Port: 1}, grpclimit.Peer{IPv6Prefix: 128}, "ip:2001:db8:1:2::5"},
		{&net.UnixAddr{Name: "/tmp/sock", Net: "unix"}, grpclimit.Peer{}, ""},
		{nil, grpclimit.Peer{}, ""},
	} {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: tc.addr})
		if got := tc.p.Key(ctx, "/x.Y/Z"); got != tc.want {
			t.Errorf("Peer%+v.Key(%v) = %q, want %q", tc.p, tc.addr, got, tc.want)
		}
	}
	if got := (grpclimit.Peer{}).Key(context.Background(), ""); got != "" {
		t.Errorf("no peer: %q", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	ok := floodgate.Limit{Limit: 1, Period: time.Second}
	for _, tc := range []struct {
		c    grpclimit.Config
		want string
	}{
		{grpclimit.Config{Limits: []floodgate.Limit{ok}}, "nil Limiter"},
		{grpclimit.Config{Limiter: limiter}, "no Limits"},
		{grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Algorithm: floodgate.Concurrency, Limit: 1, Period: time.Second}}}, "Acquire"},
		{grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{ok, ok}}, "used twice"},
		{grpclimit.Config{Limiter: limiter, Limits: []floodgate.Limit{ok}, MissingKey: -1}, "unknown MissingKey"},
	} {
		if _, err := grpclimit.New(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
}
