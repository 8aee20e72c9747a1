package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// parityYAML has the shape of upstream's example.yaml quotas and
// metadata.yaml: two quotas with metadata, a plain rule with metadata, a
// rule in shadow mode with metadata, an unlimited rule with metadata.
const parityYAML = `
domain: shop
descriptors:
  - key: plan
    value: basic
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      plan_with_quota: {name: basic, tier: 1}
  - key: plan
    value: premium
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      plan_with_quota: {name: premium, extra: yes}
      owner: billing
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata:
      owner: users
      tags: [a, b]
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
    metadata: {shadowed: true}
  - key: health
    rate_limit: {unlimited: true}
    metadata: {unlimited: true}
`

// parityService is a Service on parityYAML with opts, on a memory store
// with a fake clock, with srvOpts for the server.
func parityService(t *testing.T, srvOpts server.Options, opts *envoyrls.Options) *envoyrls.Service {
	t.Helper()
	svc, _ := parityServiceClock(t, srvOpts, opts)
	return svc
}

func parityServiceClock(t *testing.T, srvOpts server.Options, opts *envoyrls.Options) (*envoyrls.Service, *floodgatetest.FakeClock) {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	ms := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { ms.Close() })
	srvOpts.Store, srvOpts.Config, srvOpts.Limiter = ms, parseConfig(t, parityYAML), floodgate.Options{Clock: clock}
	srv, err := server.New(srvOpts)
	if err != nil {
		t.Fatal(err)
	}
	return envoyrls.New(srv, opts), clock
}

func shop(ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: ds}
}

// jsonStruct parses want, the protojson of a Struct.
func jsonStruct(t *testing.T, want string) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(want), s); err != nil {
		t.Fatalf("test bug: %v", err)
	}
	return s
}

func sameStruct(t *testing.T, step int, got, want *structpb.Struct) {
	t.Helper()
	if !reflect.DeepEqual(got.AsMap(), want.AsMap()) {
		g, _ := protojson.Marshal(got)
		w, _ := protojson.Marshal(want)
		t.Errorf("step %d: dynamic_metadata\n got %s\nwant %s", step, g, w)
	}
}

// TestDynamicMetadata answers dynamic_metadata as upstream's
// ratelimitToMetadata with RESPONSE_DYNAMIC_METADATA: the domain, the
// descriptors, the hits, and the metadata of the rules passed, merged in
// order (first value wins, mappings merged).
func TestDynamicMetadata(t *testing.T) {
	t.Parallel()
	svc := parityService(t, server.Options{}, &envoyrls.Options{DynamicMetadata: true})
	steps := []struct {
		req     *rlsv3.RateLimitRequest
		overall rlsv3.RateLimitResponse_Code
		want    string
	}{
		// Both quotas pass: basic's plan_with_quota first, premium's
		// merged into it (name kept, extra added), owner from premium.
		{shop(desc("plan", "basic"), desc("plan", "premium")), rlsv3.RateLimitResponse_OK,
			`{"domain": "shop", "descriptors": [{"entries": ["plan=basic"]}, {"entries": ["plan=premium"]}],
			  "metadata": {"plan_with_quota": {"name": "basic", "tier": 1, "extra": true}, "owner": "billing"}}`},
		// basic is over (1 a minute): only premium's metadata.
		{shop(desc("plan", "basic"), desc("plan", "premium")), rlsv3.RateLimitResponse_OK,
			`{"domain": "shop", "descriptors": [{"entries": ["plan=basic"]}, {"entries": ["plan=premium"]}],
			  "metadata": {"plan_with_quota": {"name": "premium", "extra": true}, "owner": "billing"}}`},
		// Both over: the request is OVER_LIMIT, and no rule passed.
		{shop(desc("plan", "basic"), desc("plan", "premium")), rlsv3.RateLimitResponse_OVER_LIMIT,
			`{"domain": "shop", "descriptors": [{"entries": ["plan=basic"]}, {"entries": ["plan=premium"]}]}`},
		// A shadow-mode denial passes; an unlimited rule and a descriptor
		// without a rule add nothing; user's owner comes first.
		{shop(desc("user", "u1"), desc("trial", "t"), desc("health", "h"), desc("nothing", "x")), rlsv3.RateLimitResponse_OK,
			`{"domain": "shop", "descriptors": [{"entries": ["user=u1"]}, {"entries": ["trial=t"]}, {"entries": ["health=h"]}, {"entries": ["nothing=x"]}],
			  "metadata": {"owner": "users", "tags": ["a", "b"], "shadowed": true}}`},
		// The request's hits, each descriptor's own hits (0 too) and
		// limit override.
		{&rlsv3.RateLimitRequest{Domain: "shop", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: desc("user", "u2").Entries, HitsAddend: wrapperspb.UInt64(0)},
			{Entries: desc("user", "u3").Entries, Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_HOUR}},
		}}, rlsv3.RateLimitResponse_OK, ""},
	}
	for i, s := range steps {
		resp, err := svc.ShouldRateLimit(t.Context(), s.req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != s.overall {
			t.Errorf("step %d: overall %v, want %v", i, resp.GetOverallCode(), s.overall)
		}
		if s.want != "" {
			sameStruct(t, i, resp.GetDynamicMetadata(), jsonStruct(t, s.want))
			continue
		}
		// The last step: the override's text is protobuf's own (its
		// spacing is not stable), so it is compared by building it alike.
		limitText := s.req.GetDescriptors()[1].GetLimit().String()
		want := jsonStruct(t, `{"domain": "shop", "hitsAddend": 2,
			"descriptors": [{"entries": ["user=u2"], "hitsAddend": 0}, {"entries": ["user=u3"], "limit": "PLACEHOLDER"}],
			"metadata": {"owner": "users", "tags": ["a", "b"]}}`)
		want.Fields["descriptors"].GetListValue().Values[1].GetStructValue().Fields["limit"] = structpb.NewStringValue(limitText)
		sameStruct(t, i, resp.GetDynamicMetadata(), want)
	}
}

// TestDynamicMetadataOff: without the option, as upstream's default, no
// dynamic metadata, whatever the config holds.
func TestDynamicMetadataOff(t *testing.T) {
	t.Parallel()
	svc := parityService(t, server.Options{}, nil)
	resp, err := svc.ShouldRateLimit(t.Context(), shop(desc("plan", "basic")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDynamicMetadata() != nil {
		t.Errorf("dynamic_metadata %v without the option", resp.GetDynamicMetadata())
	}
}

// TestDynamicMetadataLeavesConfig: merging the metadata of several rules
// into one answer never changes the config's (upstream's mergeMetadata
// writes into the first rule's Struct): the same request answers the same.
func TestDynamicMetadataLeavesConfig(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, parityYAML)
	before := cfg.Match("shop", []config.Entry{{Key: "plan", Value: "basic"}}).Metadata
	beforeCopy, _ := structpb.NewStruct(before)
	statuses := func() []server.Status {
		return []server.Status{
			{Code: server.OK, Limited: true, Rule: cfg.Match("shop", []config.Entry{{Key: "plan", Value: "basic"}})},
			{Code: server.OK, Limited: true, Rule: cfg.Match("shop", []config.Entry{{Key: "plan", Value: "premium"}})},
		}
	}
	req := shop(desc("plan", "basic"), desc("plan", "premium"))
	first := envoyrls.DynamicMetadata(req, statuses())
	second := envoyrls.DynamicMetadata(req, statuses())
	if !reflect.DeepEqual(first.AsMap(), second.AsMap()) {
		t.Errorf("answers differ:\n%v\n%v", first, second)
	}
	after, _ := structpb.NewStruct(before)
	if !reflect.DeepEqual(after.AsMap(), beforeCopy.AsMap()) {
		t.Errorf("the config's metadata changed: %v", before)
	}
}

// TestQuotaModeGRPC: the quotas of upstream's example, over gRPC, as
// Envoy sees them: statuses keep OVER_LIMIT, the overall code follows
// the quotas; serve -quota-mode (Options.GlobalQuotaMode) makes user a
// quota too.
func TestQuotaModeGRPC(t *testing.T) {
	t.Parallel()
	overall := func(svc *envoyrls.Service, r *rlsv3.RateLimitRequest) string {
		t.Helper()
		resp, err := svc.ShouldRateLimit(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		out := resp.GetOverallCode().String() + ":"
		for _, st := range resp.GetStatuses() {
			out += " " + st.GetCode().String()
		}
		return out
	}
	svc := parityService(t, server.Options{}, nil)
	for i, want := range []string{"OK: OK OK", "OK: OVER_LIMIT OK", "OVER_LIMIT: OVER_LIMIT OVER_LIMIT"} {
		if got := overall(svc, shop(desc("plan", "basic"), desc("plan", "premium"))); got != want {
			t.Errorf("request %d: %s, want %s", i, got, want)
		}
	}
	global := parityService(t, server.Options{GlobalQuotaMode: true}, nil)
	for range 5 {
		overall(global, shop(desc("user", "u1")))
	}
	if got, want := overall(global, shop(desc("user", "u1"), desc("user", "u2"))), "OK: OVER_LIMIT OK"; got != want {
		t.Errorf("global quota mode: %s, want %s", got, want)
	}
	if got, want := overall(global, shop(desc("user", "u1"))), "OVER_LIMIT: OVER_LIMIT"; got != want {
		t.Errorf("global quota mode, every quota over: %s, want %s", got, want)
	}
}

// blockingStore answers nothing until the call's context ends, and
// records the deadline each call had.
type blockingStore struct {
	mu        sync.Mutex
	deadlines []time.Time
}

func (b *blockingStore) Apply(ctx context.Context, _ floodgate.Request) (floodgate.Decision, error) {
	d, _ := ctx.Deadline()
	b.mu.Lock()
	b.deadlines = append(b.deadlines, d)
	b.mu.Unlock()
	<-ctx.Done()
	return floodgate.Decision{}, ctx.Err()
}

// TestEnvoyClientTimeout calls as Envoy's rate limit filter does, with
// its timeout sent as the gRPC deadline (grpc-timeout). The server's
// store call never outlives it: with the server's own timeout shorter,
// the failure mode answers in time (OK for fail_open, OVER_LIMIT for
// fail_closed), never an error, which Envoy would answer by its
// failure_mode_deny; with the caller's deadline shorter, the store call
// ends at the caller's deadline and the caller sees DeadlineExceeded,
// which Envoy treats as it treats any error: failure_mode_deny decides
// (or the failure mode's answer, when the server's, at the same deadline,
// wins the race).
func TestEnvoyClientTimeout(t *testing.T) {
	t.Parallel()
	const yaml = `
domain: shop
descriptors:
  - key: open
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 1, failure_mode: fail_closed}
`
	listen := func(serverTimeout time.Duration) (rlsv3.RateLimitServiceClient, *blockingStore) {
		store := &blockingStore{}
		srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, yaml), Limiter: floodgate.Options{Timeout: serverTimeout}})
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		envoyrls.Register(g, srv)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(lis)
		t.Cleanup(g.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rlsv3.NewRateLimitServiceClient(conn), store
	}

	// The server's timeout (10 ms, serve's default) is under the caller's.
	client, _ := listen(10 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for key, want := range map[string]rlsv3.RateLimitResponse_Code{"open": rlsv3.RateLimitResponse_OK, "closed": rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := client.ShouldRateLimit(ctx, shop(desc(key, "x")))
		if err != nil {
			t.Fatalf("%s: %v; a store timeout must be answered by the failure mode", key, err)
		}
		if resp.GetOverallCode() != want {
			t.Errorf("%s: %v, want %v", key, resp.GetOverallCode(), want)
		}
	}

	// The caller's deadline (Envoy's timeout) is under the server's. On a
	// loaded host the caller's deadline can pass before the server reaches
	// the store, which then is not called at all (nothing outlives the
	// caller, but nothing is shown either): such an attempt is tried again
	// with a deadline twice as long, up to 6 times, until one reaches the
	// store.
	client, store := listen(time.Hour)
	callerTimeout := 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(t.Context(), callerTimeout)
		sent, _ := ctx.Deadline()
		resp, err := client.ShouldRateLimit(ctx, shop(desc("open", "x")))
		cancel()
		// The client's deadline and the server's (the same instant, sent
		// as grpc-timeout) race: usually the caller gives up first and
		// sees DeadlineExceeded, but on a loaded host the server's answer
		// at its deadline, the failure mode's OK, can arrive first (4 of
		// 60 runs under -race). Either is an answer in time; what must not
		// happen is the store call outliving the caller (below).
		if status.Code(err) != codes.DeadlineExceeded && (err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK) {
			t.Errorf("got %v, %v; want DeadlineExceeded, or fail_open's OK at the deadline", resp.GetOverallCode(), err)
		}
		store.mu.Lock()
		deadlines := append([]time.Time(nil), store.deadlines...)
		store.deadlines = nil
		store.mu.Unlock()
		if len(deadlines) == 0 && attempt < 6 {
			t.Logf("attempt %d: the caller's %v passed before the store was called; again", attempt, callerTimeout)
			callerTimeout *= 2
			continue
		}
		if len(deadlines) != 1 || deadlines[0].IsZero() || deadlines[0].After(sent.Add(time.Second)) {
			t.Errorf("store call deadlines %v: want one, no later than the caller's %v", deadlines, sent)
		}
		return
	}
}

// TestUpstreamHeaders answers upstream's LIMIT_RESPONSE_HEADERS_ENABLED
// fields: the descriptor with the least remaining, or the last over its
// limit that is not a quota; reset to the end of the unit's window.
func TestUpstreamHeaders(t *testing.T) {
	t.Parallel()
	svc, clock := parityServiceClock(t, server.Options{}, &envoyrls.Options{UpstreamHeaders: &envoyrls.UpstreamHeaders{}})
	headers := func(r *rlsv3.RateLimitRequest) string {
		t.Helper()
		resp, err := svc.ShouldRateLimit(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			out = append(out, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(out, ", ")
	}
	steps := []struct {
		advance time.Duration
		req     *rlsv3.RateLimitRequest
		want    string
	}{
		// start is 12:00:15: 45 s to the minute's end.
		{0, shop(desc("user", "u1")), "RateLimit-Limit: 5, RateLimit-Remaining: 4, RateLimit-Reset: 45"},
		// premium (2 a minute) has the least remaining.
		{0, shop(desc("user", "u1"), desc("plan", "premium")), "RateLimit-Limit: 2, RateLimit-Remaining: 1, RateLimit-Reset: 45"},
		{10 * time.Second, shop(desc("user", "u1")), "RateLimit-Limit: 5, RateLimit-Remaining: 2, RateLimit-Reset: 35"},
		{0, shop(desc("user", "u1")), "RateLimit-Limit: 5, RateLimit-Remaining: 1, RateLimit-Reset: 35"},
		{0, shop(desc("user", "u1")), "RateLimit-Limit: 5, RateLimit-Remaining: 0, RateLimit-Reset: 35"},
		// u1 is over: picked, though premium comes after it.
		{0, shop(desc("user", "u1"), desc("plan", "premium")), "RateLimit-Limit: 5, RateLimit-Remaining: 0, RateLimit-Reset: 35"},
		// basic is over after u1, but a quota: u1 stays the pick.
		{0, shop(desc("plan", "basic")), "RateLimit-Limit: 1, RateLimit-Remaining: 0, RateLimit-Reset: 35"},
		{0, shop(desc("user", "u1"), desc("plan", "basic")), "RateLimit-Limit: 5, RateLimit-Remaining: 0, RateLimit-Reset: 35"},
		// Unlimited and unmatched descriptors have no current limit.
		{0, shop(desc("health", "h"), desc("nothing", "x")), ""},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		if got := headers(s.req); got != s.want {
			t.Errorf("step %d: %q, want %q", i, got, s.want)
		}
	}
	// The names are the caller's; OmitHeaders wins.
	named, _ := parityServiceClock(t, server.Options{}, &envoyrls.Options{UpstreamHeaders: &envoyrls.UpstreamHeaders{Limit: "X-L", Remaining: "X-R", Reset: "X-T"}})
	resp, err := named.ShouldRateLimit(t.Context(), shop(desc("user", "u1")))
	if err != nil {
		t.Fatal(err)
	}
	if hs := resp.GetResponseHeadersToAdd(); len(hs) != 3 || hs[0].GetKey() != "X-L" || hs[1].GetKey() != "X-R" || hs[2].GetKey() != "X-T" {
		t.Errorf("named: %v", hs)
	}
	omitted, _ := parityServiceClock(t, server.Options{}, &envoyrls.Options{OmitHeaders: true, UpstreamHeaders: &envoyrls.UpstreamHeaders{}})
	if resp, _ := omitted.ShouldRateLimit(t.Context(), shop(desc("user", "u1"))); len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("OmitHeaders: %v", resp.GetResponseHeadersToAdd())
	}
}

// TestUpstreamHeadersJSON: POST /json in upstream's header mode carries the
// three fields in its body only, as upstream's, and no HTTP fields of its
// own.
func TestUpstreamHeadersJSON(t *testing.T) {
	t.Parallel()
	svc := parityService(t, server.Options{}, &envoyrls.Options{UpstreamHeaders: &envoyrls.UpstreamHeaders{}})
	rec := httptest.NewRecorder()
	svc.JSONHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(`{"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "u1"}]}]}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	for _, name := range []string{"RateLimit", "RateLimit-Policy", "RateLimit-Limit", "Retry-After"} {
		if v := rec.Header().Get(name); v != "" {
			t.Errorf("HTTP field %s: %q", name, v)
		}
	}
	if body := rec.Body.String(); !strings.Contains(body, `"key":"RateLimit-Remaining"`) && !strings.Contains(body, `"key": "RateLimit-Remaining"`) {
		t.Errorf("body without upstream's fields: %s", body)
	}
}

// TestCountRejectedAsUpstream: upstream counts the hits of a denied
// request (INCRBY, then compare), so a client that keeps retrying stays
// denied; Floodgate counts only admitted hits unless the rule sets
// count_rejected, which then answers as upstream does.
func TestCountRejectedAsUpstream(t *testing.T) {
	t.Parallel()
	const yaml = `
domain: shop
descriptors:
  - key: floodgate
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: upstream
    rate_limit: {unit: minute, requests_per_unit: 3, count_rejected: true}
`
	clock := floodgatetest.NewFakeClock(start)
	ms := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { ms.Close() })
	srv, err := server.New(server.Options{Store: ms, Config: parseConfig(t, yaml), Limiter: floodgate.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	svc := envoyrls.New(srv, nil)
	for key, want := range map[string][]string{
		"floodgate": {"OK r=1", "OVER_LIMIT r=1", "OK r=0"},
		"upstream":  {"OK r=1", "OVER_LIMIT r=0", "OVER_LIMIT r=0"},
	} {
		for i, hits := range []uint64{2, 2, 1} {
			r := shop(desc(key, "k"))
			r.HitsAddend = uint32(hits)
			resp, err := svc.ShouldRateLimit(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			st := resp.GetStatuses()[0]
			if got := fmt.Sprintf("%s r=%d", st.GetCode(), st.GetLimitRemaining()); got != want[i] {
				t.Errorf("%s request %d (hits %d): %s, want %s", key, i, hits, got, want[i])
			}
		}
	}
}
