package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestServeRLQS: two serve replicas on one Redis answer Envoy's quota
// service on their gRPC port: an Envoy alone on one gets the whole limit
// as a token bucket, a second Envoy on the other replica finds it held
// (the replicas share the leases in Redis) and gets what is left; at
// shutdown the replica expires its assignments (TTL 0) and ends the
// stream.
func TestServeRLQS(t *testing.T) {
	red := redistest.Standalone(t)
	dir, _ := writeConfig(t, `domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
`)
	a := startServe(t, "-config", dir, "-redis", "redis://"+red.Addr, "-rlqs-ttl", "5s", "-rlqs-floor", "0")
	b := startServe(t, "-config", dir, "-redis", "redis://"+red.Addr, "-rlqs-ttl", "5s", "-rlqs-floor", "0")
	report := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}, TimeElapsed: durationpb.New(0), NumRequestsDenied: 1}}}
	open := func(addr string) grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse] {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		t.Cleanup(cancel)
		st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	ask := func(st grpc.BidiStreamingClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) string {
		if err := st.Send(report); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
		if got := qa.GetAssignmentTimeToLive().GetSeconds(); got != 5 {
			t.Errorf("TTL %ds, want 5 (-rlqs-ttl)", got)
		}
		return strings.ReplaceAll(qa.GetRateLimitStrategy().String(), "  ", " ")
	}
	sa := open(a.grpcAddr)
	// The whole limit (no floor, so none kept for a newcomer), in a token
	// bucket that holds a second of it: a window rule's new bucket hands
	// out 10, not the window's 600.
	if got, want := ask(sa), `token_bucket:{max_tokens:10 tokens_per_fill:{value:600} fill_interval:{seconds:60}}`; got != want {
		t.Errorf("the first Envoy got %s, want %s", got, want)
	}
	sb := open(b.grpcAddr)
	if got, want := ask(sb), `blanket_rule:DENY_ALL`; got != want {
		t.Errorf("the second Envoy, on the other replica, got %s while the first holds the whole limit; want %s", got, want)
	}
	for series, want := range map[string]int64{"floodgate_rlqs_streams": 1, "floodgate_rlqs_buckets": 1, "floodgate_rlqs_assignments_total": 1, "floodgate_rlqs_leases_total": 2} {
		if got := b.metric(t, series); got != want {
			t.Errorf("replica b's %s = %d, want %d", series, got, want)
		}
	}
	if code := a.stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
	resp, err := sa.Recv()
	if err != nil {
		t.Fatalf("no drain answer: %v", err)
	}
	if got := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); got != 0 {
		t.Errorf("the drain's TTL is %v, want 0", got)
	}
	if _, err := sa.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after the drain: %v, want the stream's end", err)
	}
}

// TestServeRLQSBadFlags: each bad -rlqs-* flag is refused at start (exit
// 2) with a message naming it.
func TestServeRLQSBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"-rlqs-ttl", "1500ms"}, "-rlqs-ttl"},
		{[]string{"-rlqs-ttl", "0s"}, "-rlqs-ttl"},
		{[]string{"-rlqs-grace", "-1s"}, "-rlqs-grace"},
		{[]string{"-rlqs-ttl", "4s", "-rlqs-change-every", "5s"}, "-rlqs-change-every"},
		{[]string{"-rlqs-idle", "0s"}, "-rlqs-idle"},
		{[]string{"-rlqs-floor", "1.5"}, "-rlqs-floor"},
		{[]string{"-rlqs-floor", "NaN"}, "-rlqs-floor"},
		{[]string{"-rlqs-policy", "fair"}, "-rlqs-policy"},
		{[]string{"-rlqs-max-stream-buckets", "0"}, "-rlqs-max-stream-buckets"},
		{[]string{"-rlqs-max-client-streams", "0"}, "-rlqs-max-client-streams"},
		{[]string{"-rlqs-max-client-buckets", "-1"}, "-rlqs-max-client-buckets"},
		{[]string{"-rlqs-home", "redis-cluster://127.0.0.1:1"}, "-rlqs-home"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), append([]string{"serve"}, c.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.flag+":") {
			t.Errorf("%v: exit %d, want 2 naming %s; stderr %s", c.args, code, c.flag, stderr.String())
		}
	}
}
