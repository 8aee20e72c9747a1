package rlqs

import (
	"errors"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
)

const testYAML = `domain: edge
descriptors:
  - key: tenant
    value: t1
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 600}
  - key: route
    descriptors:
      - key: tenant
        value: vip
        rate_limit: {unit: second, requests_per_unit: 50, algorithm: gcra, burst: 100}
  - key: user
    rate_limit: {period: 1500ms, requests_per_unit: 3}
`

func newTestService(t testing.TB, o *Options) *Service {
	t.Helper()
	srv := servertest.New(t, "rules.yaml", testYAML, server.Options{})
	svc, err := New(srv, o)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func usage(id map[string]string, allowed, denied uint64) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
		TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
}

// TestBadReports: each malformed report is an InvalidArgument naming its
// field, or ResourceExhausted for the service's own bounds, and the
// stream's state is left as it was.
func TestBadReports(t *testing.T) {
	ok := map[string]string{"user": "u1"}
	many := map[string]string{}
	for i := range server.MaxEntries + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	for _, c := range []struct {
		name   string
		first  *rlqsv3.RateLimitQuotaUsageReports // sent before, answered
		report *rlqsv3.RateLimitQuotaUsageReports
		code   codes.Code
		field  string
	}{
		{name: "no domain", report: &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, 1, 0)}},
			code: codes.InvalidArgument, field: "domain"},
		{name: "unknown domain", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "nope"}, code: codes.InvalidArgument, field: "domain"},
		{name: "another domain later", first: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"},
			report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "other"}, code: codes.InvalidArgument, field: "domain"},
		{name: "no bucket id", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, 1, 0), {}}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[1].bucket_id"},
		{name: "empty key", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"": "x"}, 1, 0)}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[0].bucket_id"},
		{name: "too many entries", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(many, 1, 0)}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[0].bucket_id"},
		{name: "huge bucket id", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"user": strings.Repeat("x", 1<<20)}, 1, 0)}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[0].bucket_id"},
		{name: "negative time elapsed", report: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqsv3.BucketId{Bucket: ok}, TimeElapsed: &durationpb.Duration{Seconds: -1}}}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[0].time_elapsed"},
		{name: "too many buckets", first: &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			usage(map[string]string{"user": "a"}, 1, 0), usage(map[string]string{"user": "b"}, 1, 0)}},
			report: &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				usage(map[string]string{"user": "a"}, 1, 0), usage(map[string]string{"user": "c"}, 1, 0)}},
			code: codes.InvalidArgument, field: "bucket_quota_usages[1].bucket_id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := newTestService(t, &Options{MaxStreamBuckets: 2})
			ss := svc.newSession()
			if c.first != nil {
				if _, err := ss.handle(t.Context(), c.first); err != nil {
					t.Fatalf("first report: %v", err)
				}
			}
			before := len(ss.buckets)
			_, err := ss.handle(t.Context(), c.report)
			st, _ := status.FromError(err)
			if st.Code() != c.code || !strings.HasPrefix(st.Message(), "rlqs: "+c.field+":") {
				t.Fatalf("err = %v, want %v starting with %q", err, c.code, "rlqs: "+c.field+":")
			}
			if len(st.Message()) > 1024 {
				t.Errorf("the error is %d bytes: it echoes the input", len(st.Message()))
			}
			if got := len(ss.buckets); got != before && c.name != "too many buckets" {
				t.Errorf("the refused report left %d buckets, had %d", got, before)
			}
		})
	}
}

// TestServiceBound: MaxBuckets counts the buckets of every stream; a
// report beyond it is ResourceExhausted, and a closed stream gives its
// buckets back.
func TestServiceBound(t *testing.T) {
	svc := newTestService(t, &Options{MaxBuckets: 3})
	a, b := svc.newSession(), svc.newSession()
	rep := func(users ...string) *rlqsv3.RateLimitQuotaUsageReports {
		m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
		for _, u := range users {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(map[string]string{"user": u}, 1, 0))
		}
		return m
	}
	if _, err := a.handle(t.Context(), rep("1", "2")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.handle(t.Context(), rep("3")); err != nil {
		t.Fatal(err)
	}
	_, err := b.handle(t.Context(), rep("4"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth bucket: %v, want ResourceExhausted", err)
	}
	svc.mu.Lock()
	svc.streams[a] = make(chan struct{})
	svc.mu.Unlock()
	svc.close(a)
	if _, err := b.handle(t.Context(), rep("4")); err != nil {
		t.Fatalf("after a stream of 2 buckets closed: %v", err)
	}
}

// TestMapping: bucket IDs find their rule whatever the order of their
// entries, in the order the config nests the keys; the assignment is the
// token bucket of the rule's share.
func TestMapping(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	svc := newTestService(t, &Options{Clock: func() time.Time { return clock }})
	ss := svc.newSession()
	for _, c := range []struct {
		id   map[string]string
		want string // the strategy's text
	}{
		// 600 per minute, one holder: the limit less one floor (12, the
		// room kept for a newcomer), 588 refilled over the minute, and a
		// second of it (9.8, rounded up) as the capacity: a fixed window's
		// new token bucket hands out a second's worth, not the window's.
		{map[string]string{"route": "/a", "tenant": "t1"}, `token_bucket:{max_tokens:10 tokens_per_fill:{value:588} fill_interval:{seconds:60}}`},
		// tenant → route knows no tenant vip; route → tenant=vip does: a
		// gcra of 50 per second, burst 100, less the floor of 1: 49 per
		// second, capacity 98.
		{map[string]string{"tenant": "vip", "route": "/b"}, `token_bucket:{max_tokens:98 tokens_per_fill:{value:49} fill_interval:{seconds:1}}`},
		// 3 per 1.5 s, less the floor of 1: a fill interval of 2 s (whole
		// seconds), 2 tokens per fill (⌊2×2/1.5⌋), the capacity 2.
		{map[string]string{"user": "u"}, `token_bucket:{max_tokens:2 tokens_per_fill:{value:2} fill_interval:{seconds:2}}`},
		// No rule nests {route, user}: ALLOW_ALL.
		{map[string]string{"route": "/a", "user": "u"}, `blanket_rule:ALLOW_ALL`},
	} {
		resp, err := ss.handle(t.Context(), &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge",
			BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(c.id, 0, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.BucketAction) != 1 {
			t.Fatalf("%v: %d actions, want 1", c.id, len(resp.BucketAction))
		}
		qa := resp.BucketAction[0].GetQuotaAssignmentAction()
		got := strings.ReplaceAll(qa.GetRateLimitStrategy().String(), "  ", " ")
		if got != c.want {
			t.Errorf("%v: %s, want %s", c.id, got, c.want)
		}
		if got := qa.GetAssignmentTimeToLive().AsDuration(); got != DefaultTTL {
			t.Errorf("%v: TTL %v, want %v", c.id, got, DefaultTTL)
		}
	}
}

// TestTokenBucketRounding: a share becomes a bucket whose rate and
// capacity are at most the share's, never above, for periods that are
// not whole seconds and shares too small for one token.
func TestTokenBucketRounding(t *testing.T) {
	for _, c := range []struct {
		l     floodgate.Limit
		share int64
		want  strategy
	}{
		{floodgate.Limit{Limit: 10, Period: 500 * time.Millisecond}, 5, strategy{bucket: true, maxTokens: 5, tokensPerFill: 10, fillSeconds: 1, share: 5}},
		{floodgate.Limit{Limit: 100, Period: time.Second, Algorithm: floodgate.TokenBucket, Burst: 10}, 5, strategy{share: 5, blanket: 1}}, // capacity 0.5
		{floodgate.Limit{Limit: 1 << 40, Period: time.Second}, 1 << 40, strategy{bucket: true, maxTokens: 1<<32 - 1, tokensPerFill: 1<<32 - 1, fillSeconds: 1, share: 1 << 40}},
		// A window's capacity is a second of the share's rate, at least 1.
		{floodgate.Limit{Limit: 7, Period: floodgate.MaxPeriod}, 7, strategy{bucket: true, maxTokens: 1, tokensPerFill: 7, fillSeconds: 281474977, share: 7}},
		{floodgate.Limit{Limit: 10, Period: time.Second}, 0, strategy{blanket: 1}},
	} {
		if got := tokenBucket(c.l, c.share); *got != c.want {
			t.Errorf("tokenBucket(%v, %d) = %+v, want %+v", c.l, c.share, *got, c.want)
		}
	}
}

// FuzzReport feeds arbitrary bytes, as a report, to a stream: it never
// panics, an error is InvalidArgument or ResourceExhausted, and an
// answer has one action per bucket reported, for a bucket reported.
func FuzzReport(f *testing.F) {
	for _, m := range []*rlqsv3.RateLimitQuotaUsageReports{
		{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"user": "u"}, 3, 1)}},
		{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "t", "route": "/"}, 1<<63, 1<<63)}},
		{Domain: "edge"},
		{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	svc := newTestService(f, &Options{MaxStreamBuckets: 8, MaxBuckets: 1 << 20})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		ss := svc.newSession()
		defer func() {
			svc.mu.Lock()
			svc.streams[ss] = make(chan struct{})
			svc.mu.Unlock()
			svc.close(ss)
		}()
		for _, data := range [][]byte{first, second} {
			var m rlqsv3.RateLimitQuotaUsageReports
			if proto.Unmarshal(data, &m) != nil {
				return
			}
			resp, err := ss.handle(t.Context(), &m)
			if err != nil {
				if c := status.Code(err); c != codes.InvalidArgument && c != codes.ResourceExhausted {
					t.Fatalf("error %v, want InvalidArgument or ResourceExhausted", err)
				}
				if errors.Is(err, floodgate.ErrInvalidRequest) {
					t.Fatalf("a floodgate error reached the stream: %v", err)
				}
				return
			}
			if got, want := len(resp.BucketAction), len(m.BucketQuotaUsages); got != want {
				t.Fatalf("%d actions for %d buckets", got, want)
			}
			for i, a := range resp.BucketAction {
				if bucketKey(a.GetBucketId().GetBucket()) != bucketKey(m.BucketQuotaUsages[i].GetBucketId().GetBucket()) {
					t.Fatalf("action %d is for %v, the report's %d is %v", i, a.GetBucketId(), i, m.BucketQuotaUsages[i].GetBucketId())
				}
			}
			if len(ss.buckets) > 8 {
				t.Fatalf("the stream holds %d buckets, above its bound 8", len(ss.buckets))
			}
		}
	})
}

// TestReloadAbandons: a reload that changes a bucket's limit abandons the
// bucket (Envoy would keep a token bucket whose max_tokens and
// tokens_per_fill did not change, here 600 every 60 s and then every
// 120 s); a report that subscribes it again gets DENY_ALL until
// ChangeEvery has passed since its last token bucket, then the new
// limit's.
func TestReloadAbandons(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	svc := newTestService(t, &Options{Clock: func() time.Time { return now }})
	ss := svc.newSession()
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"tenant": "t1", "route": "/"}, 1, 0)}}
	if _, err := ss.handle(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	d, err := config.Parse("rules.yaml", []byte(strings.Replace(testYAML, "{unit: minute, requests_per_unit: 600}", "{period: 2m, requests_per_unit: 600}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	svc.srv.SetConfig(cfg)
	resp, err := ss.handle(t.Context(), rep)
	if err != nil {
		t.Fatal(err)
	}
	if resp.BucketAction[0].GetAbandonAction() == nil {
		t.Fatalf("after the reload: %v, want the bucket abandoned", resp.BucketAction[0])
	}
	now = now.Add(time.Second)
	resp, err = ss.handle(t.Context(), rep)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got.String() != "DENY_ALL" || resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil {
		t.Errorf("subscribed again 1 s after its last token bucket: %v, want DENY_ALL", resp.BucketAction[0])
	}
	now = now.Add(DefaultTTL / 2)
	resp, err = ss.handle(t.Context(), rep)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetFillInterval().GetSeconds(); got != 120 {
		t.Errorf("subscribed again: fill interval %ds, want 120", got)
	}
}

// TestSentBounded: however often a client reports, a bucket remembers one
// share per change, not one per report.
func TestSentBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	svc := newTestService(t, &Options{Clock: func() time.Time { return now }})
	ss := svc.newSession()
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"user": "u"}, 1, 0)}}
	for range 10_000 {
		now = now.Add(time.Millisecond)
		if _, err := ss.handle(t.Context(), rep); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range ss.buckets {
		if len(b.sent) > 4 {
			t.Errorf("after 10,000 reports in 10 s the bucket remembers %d shares sent; want one per change, at most (TTL+Grace)/ChangeEvery+2 = 4", len(b.sent))
		}
	}
}

// TestStreamBounds: a replica serves at most MaxStreams streams
// (ResourceExhausted beyond), and none once it drains (Unavailable).
func TestStreamBounds(t *testing.T) {
	svc := newTestService(t, &Options{MaxStreams: 1})
	ss, _, err := svc.open()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.open(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second stream: %v, want ResourceExhausted", err)
	}
	svc.close(ss)
	if err := svc.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.open(); status.Code(err) != codes.Unavailable {
		t.Errorf("a stream after Drain: %v, want Unavailable", err)
	}
}
