package envoyrls_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// edgeYAML is written in envoyproxy/ratelimit's format, as its README
// documents it, plus one Floodgate extension (period) and one failure mode.
const edgeYAML = `
domain: edge
descriptors:
  # Each client address has its own 3 per minute.
  - key: remote_address
    rate_limit:
      name: per_ip
      unit: minute
      requests_per_unit: 3

  # Nested: one login per second per address.
  - key: path
    value: /login
    descriptors:
      - key: remote_address
        rate_limit:
          unit: second
          requests_per_unit: 1

  # replaces: the export limit replaces the tier limit when both match.
  - key: tier
    value: standard
    descriptors:
      - key: user
        rate_limit:
          name: standard_user
          unit: minute
          requests_per_unit: 2
  - key: endpoint
    value: export
    descriptors:
      - key: user
        rate_limit:
          replaces:
            - name: standard_user
          unit: minute
          requests_per_unit: 5

  - key: internal
    rate_limit:
      unlimited: true

  - key: canary
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1

  - key: batch
    rate_limit:
      period: 90s
      requests_per_unit: 10

  - key: payment
    rate_limit:
      unit: second
      requests_per_unit: 10
      failure_mode: fail_closed
`

// start is 15 s into a minute: a minute window ends in 45 s.
var start = time.Date(2026, 11, 29, 12, 0, 15, 0, time.UTC)

type fixture struct {
	client rlsv3.RateLimitServiceClient
	clock  *floodgatetest.FakeClock
	srv    *server.Server
	addr   string
}

func parseConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	d, err := config.Parse("edge.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newServer returns a server on the memory store (or store) and a fake clock.
func newServer(t testing.TB, store floodgate.Store) (*server.Server, *floodgatetest.FakeClock) {
	t.Helper()
	if store == nil {
		m := memstore.New(&memstore.Options{SweepInterval: -1})
		t.Cleanup(func() { m.Close() })
		store = m
	}
	clock := floodgatetest.NewFakeClock(start)
	// A deadline far above the server's default 10 ms, which is not what
	// these tests check: on a loaded machine running the race detector, a
	// memory store's call once took longer, and fail_open answered OK
	// without the limit's numbers.
	srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, edgeYAML), Limiter: floodgate.Options{Clock: clock, Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	return srv, clock
}

// serve starts a real gRPC server on 127.0.0.1 with the service registered,
// and returns a client connected to it.
func serve(t testing.TB, store floodgate.Store, opts *envoyrls.Options) fixture {
	t.Helper()
	srv, clock := newServer(t, store)
	g := grpc.NewServer()
	if opts == nil {
		envoyrls.Register(g, srv)
	} else {
		rlsv3.RegisterRateLimitServiceServer(g, envoyrls.New(srv, opts))
	}
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
	return fixture{client: rlsv3.NewRateLimitServiceClient(conn), clock: clock, srv: srv, addr: lis.Addr().String()}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func call(t testing.TB, f fixture, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := f.client.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// want is the expected status of one descriptor, in a compact form:
// "OK", "OVER_LIMIT", "OK 2/MINUTE per_ip r=1 t=45s".
func format(s *rlsv3.RateLimitResponse_DescriptorStatus) string {
	out := s.GetCode().String()
	if l := s.GetCurrentLimit(); l != nil {
		out += fmt.Sprintf(" %d/%s", l.GetRequestsPerUnit(), l.GetUnit())
		if l.GetName() != "" {
			out += " " + l.GetName()
		}
	}
	if s.GetCurrentLimit() != nil || s.GetLimitRemaining() != 0 {
		out += fmt.Sprintf(" r=%d", s.GetLimitRemaining())
	}
	if d := s.GetDurationUntilReset(); d != nil {
		out += " t=" + d.AsDuration().String()
	}
	return out
}

// step is one call and the statuses it must answer.
type step struct {
	advance  time.Duration
	req      *rlsv3.RateLimitRequest
	overall  string
	statuses []string
}

func run(t *testing.T, f fixture, steps []step) {
	t.Helper()
	for i, s := range steps {
		f.clock.Advance(s.advance)
		resp := call(t, f, s.req)
		if got := resp.GetOverallCode().String(); got != s.overall {
			t.Errorf("step %d: overall_code %s, want %s", i, got, s.overall)
		}
		if len(resp.GetStatuses()) != len(s.statuses) {
			t.Fatalf("step %d: %d statuses, want %d: %v", i, len(resp.GetStatuses()), len(s.statuses), resp.GetStatuses())
		}
		for j, st := range resp.GetStatuses() {
			if got := format(st); got != s.statuses[j] {
				t.Errorf("step %d: statuses[%d] = %q, want %q", i, j, got, s.statuses[j])
			}
		}
	}
}

func req(ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds}
}

func TestDescriptorMatching(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	ip1 := desc("remote_address", "10.0.0.1")
	ip2 := desc("remote_address", "10.0.0.2")
	run(t, f, []step{
		{req: req(ip1), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=2 t=45s"}},
		{req: req(ip1), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=1 t=45s"}},
		{advance: 10 * time.Second, req: req(ip1), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=0 t=35s"}},
		{req: req(ip1), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 3/MINUTE per_ip r=0 t=35s"}},
		// Each value of a key-only descriptor has a counter of its own.
		{req: req(ip2), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=2 t=35s"}},
		// Statuses come in descriptor order; one over limit is enough, and
		// the request takes nothing from the others (all or nothing:
		// ip2 keeps its 2).
		{req: req(ip2, ip1, desc("nothing", "here")), overall: "OVER_LIMIT", statuses: []string{
			"OK 3/MINUTE per_ip r=2 t=35s", "OVER_LIMIT 3/MINUTE per_ip r=0 t=35s", "OK"}},
		// The next aligned minute starts afresh.
		{advance: 35 * time.Second, req: req(ip1), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=2 t=1m0s"}},
	})
}

func TestNestedDescriptors(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	login := desc("path", "/login", "remote_address", "10.0.0.1")
	run(t, f, []step{
		{req: req(login), overall: "OK", statuses: []string{"OK 1/SECOND r=0 t=1s"}},
		{req: req(login), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 1/SECOND r=0 t=1s"}},
		{advance: time.Second, req: req(login), overall: "OK", statuses: []string{"OK 1/SECOND r=0 t=1s"}},
		// A value the config does not list, with no key-only fallback: no rule.
		{req: req(desc("path", "/other", "remote_address", "10.0.0.1")), overall: "OK", statuses: []string{"OK"}},
		// A rule applies only at its exact depth.
		{req: req(desc("path", "/login")), overall: "OK", statuses: []string{"OK"}},
		{req: req(desc("path", "/login", "remote_address", "10.0.0.1", "extra", "x")), overall: "OK", statuses: []string{"OK"}},
	})
}

func TestReplaces(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	tier := desc("tier", "standard", "user", "alice")
	export := desc("endpoint", "export", "user", "alice")
	run(t, f, []step{
		// Both match: the tier rule is replaced, neither checked nor counted.
		{req: req(tier, export), overall: "OK", statuses: []string{"OK", "OK 5/MINUTE r=4 t=45s"}},
		{req: req(tier, export), overall: "OK", statuses: []string{"OK", "OK 5/MINUTE r=3 t=45s"}},
		{req: req(tier, export), overall: "OK", statuses: []string{"OK", "OK 5/MINUTE r=2 t=45s"}},
		// Alone, the tier rule applies, its count untouched by the above.
		{req: req(tier), overall: "OK", statuses: []string{"OK 2/MINUTE standard_user r=1 t=45s"}},
		{req: req(tier), overall: "OK", statuses: []string{"OK 2/MINUTE standard_user r=0 t=45s"}},
		{req: req(tier), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 2/MINUTE standard_user r=0 t=45s"}},
		// Replaced, an exhausted rule does not deny.
		{req: req(tier, export), overall: "OK", statuses: []string{"OK", "OK 5/MINUTE r=1 t=45s"}},
	})
}

func TestUnlimitedAndUnknown(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	for i := range 5 {
		resp := call(t, f, req(desc("internal", "batch-job")))
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || st.GetCode() != rlsv3.RateLimitResponse_OK ||
			st.GetCurrentLimit() != nil || st.GetLimitRemaining() != math.MaxUint32 || st.GetDurationUntilReset() != nil {
			t.Fatalf("call %d: unlimited answered %v", i, resp)
		}
		if len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("call %d: headers %v for an unlimited descriptor", i, resp.GetResponseHeadersToAdd())
		}
	}
	resp := call(t, f, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("remote_address", "10.0.0.1"), desc("a", "b", "c", "d"),
	}})
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown domain: overall %v", resp.GetOverallCode())
	}
	for i, st := range resp.GetStatuses() {
		if got := format(st); got != "OK" {
			t.Errorf("unknown domain: statuses[%d] = %q, want OK with nothing else", i, got)
		}
	}
}

func TestShadowMode(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	canary := desc("canary", "build-7")
	run(t, f, []step{
		{req: req(canary), overall: "OK", statuses: []string{"OK 1/HOUR r=0 t=59m45s"}},
		// Denied by the limit, answered OK: the limit's numbers stay.
		{req: req(canary), overall: "OK", statuses: []string{"OK 1/HOUR r=0 t=59m45s"}},
		{req: req(canary, desc("remote_address", "10.0.0.9")), overall: "OK", statuses: []string{
			"OK 1/HOUR r=0 t=59m45s", "OK 3/MINUTE per_ip r=2 t=45s"}},
	})
	// A shadow denial carries no Retry-After.
	resp := call(t, f, req(canary))
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == "Retry-After" {
			t.Errorf("shadow-mode denial sent %s: %s", h.GetKey(), h.GetValue())
		}
	}
}

func TestHitsAddend(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	ip := desc("remote_address", "10.0.0.1")
	withCost := func(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
		c := desc()
		c.Entries, c.HitsAddend = d.Entries, wrapperspb.UInt64(n)
		return c
	}
	run(t, f, []step{
		// The request's hits_addend is every descriptor's cost.
		{req: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{ip}, HitsAddend: 2},
			overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=1 t=45s"}},
		// Too much for what is left: denied, and (unlike upstream) not counted.
		{req: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{ip}, HitsAddend: 2},
			overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 3/MINUTE per_ip r=1 t=45s"}},
		// A descriptor's hits_addend 0 checks without consuming.
		{req: req(withCost(ip, 0)), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=1 t=45s"}},
		// A descriptor's own hits_addend wins over the request's.
		{req: &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{withCost(ip, 1)}, HitsAddend: 3},
			overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=0 t=45s"}},
		// At the limit a check still passes (nothing more asked), a hit does not.
		{req: req(withCost(ip, 0), ip), overall: "OVER_LIMIT", statuses: []string{
			"OK 3/MINUTE per_ip r=0 t=45s", "OVER_LIMIT 3/MINUTE per_ip r=0 t=45s"}},
		// Unset (0) means 1.
		{req: req(desc("remote_address", "10.0.0.2")), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=2 t=45s"}},
		// Each descriptor its own cost, in one request.
		{req: req(withCost(desc("remote_address", "10.0.0.3"), 3), withCost(desc("remote_address", "10.0.0.4"), 2)),
			overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=0 t=45s", "OK 3/MINUTE per_ip r=1 t=45s"}},
	})
}

func TestLimitOverride(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	override := func(d *commonv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, mult uint32) *commonv3.RateLimitDescriptor {
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
		if mult > 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return d
	}
	run(t, f, []step{
		// No rule matches these entries: the override limits them anyway.
		{req: req(override(desc("user", "bob"), 2, typev3.RateLimitUnit_MINUTE, 0)), overall: "OK", statuses: []string{"OK 2/MINUTE r=1 t=45s"}},
		{req: req(override(desc("user", "bob"), 2, typev3.RateLimitUnit_MINUTE, 0)), overall: "OK", statuses: []string{"OK 2/MINUTE r=0 t=45s"}},
		{req: req(override(desc("user", "bob"), 2, typev3.RateLimitUnit_MINUTE, 0)), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 2/MINUTE r=0 t=45s"}},
		// Where a rule matches, the override replaces it, on its own counter.
		{req: req(override(desc("remote_address", "10.0.0.1"), 100, typev3.RateLimitUnit_HOUR, 0)), overall: "OK", statuses: []string{"OK 100/HOUR r=99 t=59m45s"}},
		{req: req(desc("remote_address", "10.0.0.1")), overall: "OK", statuses: []string{"OK 3/MINUTE per_ip r=2 t=45s"}},
		// unit_multiplier: ten minutes, aligned (12:00:15 to 12:10:00); not one
		// unit, so the response says UNKNOWN.
		{req: req(override(desc("user", "carol"), 7, typev3.RateLimitUnit_MINUTE, 10)), overall: "OK", statuses: []string{"OK 7/UNKNOWN r=6 t=9m45s"}},
		// WEEK, by its number in the response's enum, as upstream casts it.
		{req: req(override(desc("user", "dave"), 1, typev3.RateLimitUnit(7), 0)), overall: "OK", statuses: []string{"OK 1/WEEK r=0 t=" + weekReset().String()}},
		// requests_per_unit 0 denies everything, as upstream.
		{req: req(override(desc("user", "eve"), 0, typev3.RateLimitUnit_SECOND, 0)), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 0/SECOND r=0 t=0s"}},
	})
	// In an unknown domain the override is ignored, as upstream ignores it.
	resp := call(t, f, &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*commonv3.RateLimitDescriptor{
		override(desc("user", "bob"), 1, typev3.RateLimitUnit_SECOND, 0)}})
	if got := format(resp.GetStatuses()[0]); got != "OK" || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("override in an unknown domain: %s, overall %v; want OK with nothing else", got, resp.GetOverallCode())
	}
}

// weekReset is the time from start to the next multiple of a week since the
// Unix epoch (a Thursday).
func weekReset() time.Duration {
	const week = 7 * 24 * time.Hour
	since := time.Duration(start.UnixNano()) % week
	return week - since
}

func TestPeriodNotAUnit(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	// 12:00:15 is 15 s into a 90 s window aligned to the epoch (12:00:00).
	run(t, f, []step{
		{req: req(desc("batch", "nightly")), overall: "OK", statuses: []string{"OK 10/UNKNOWN r=9 t=1m15s"}},
	})
}

func TestInvalidArgument(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	ip := desc("remote_address", "10.0.0.1")
	many := make([]*commonv3.RateLimitDescriptor, server.MaxDescriptors+1)
	for i := range many {
		many[i] = ip
	}
	longEntries := desc()
	for range server.MaxEntries + 1 {
		longEntries.Entries = append(longEntries.Entries, ip.Entries[0])
	}
	for _, tc := range []struct {
		name  string
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{ip}}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, "descriptors"},
		{"descriptor without entries", req(ip, desc()), "descriptors[1].entries"},
		{"too many entries", req(longEntries), "descriptors[0].entries"},
		{"empty key", req(ip, desc("remote_address", "x", "", "y")), "descriptors[1].entries[1].key"},
		{"hits_addend over the maximum", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries, HitsAddend: wrapperspb.UInt64(uint64(floodgate.MaxLimit) + 1)}), "descriptors[0].hits_addend"},
		{"is_negative_hits", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries, HitsAddend: wrapperspb.UInt64(1), IsNegativeHits: true}), "descriptors[0].is_negative_hits"},
		{"override unit UNKNOWN", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries,
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}), "descriptors[0].limit.unit"},
		{"override unit not in the enum", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries,
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 42}}), "descriptors[0].limit.unit"},
		{"override unit_multiplier 0", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries,
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}}), "descriptors[0].limit.unit_multiplier"},
		{"override period too long", req(&commonv3.RateLimitDescriptor{Entries: ip.Entries,
			Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(100)}}), "descriptors[0].limit.unit_multiplier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := f.client.ShouldRateLimit(t.Context(), tc.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("got %v, %v; want InvalidArgument", resp, err)
			}
			if !strings.HasPrefix(st.Message(), tc.field+": ") {
				t.Errorf("message %q does not start with the field %q", st.Message(), tc.field)
			}
			var br *errdetails.BadRequest
			for _, d := range st.Details() {
				if d, ok := d.(*errdetails.BadRequest); ok {
					br = d
				}
			}
			if br == nil || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != tc.field {
				t.Errorf("details %v, want a BadRequest naming %q", st.Details(), tc.field)
			}
		})
	}
}

func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	f := serve(t, nil, nil)
	headers := func(resp *rlsv3.RateLimitResponse) string {
		var b []string
		for _, h := range resp.GetResponseHeadersToAdd() {
			b = append(b, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(b, "\n")
	}
	ip := desc("remote_address", "10.0.0.1")
	login := desc("path", "/login", "remote_address", "10.0.0.1")
	for i, want := range []string{
		"Ratelimit-Policy: \"per_ip\";q=3;w=60, \"1-per-1s\";q=1;w=1\nRatelimit: \"per_ip\";r=2;t=45, \"1-per-1s\";r=0;t=1",
		// Denied by the login limit, the request takes nothing of per_ip.
		"Ratelimit-Policy: \"per_ip\";q=3;w=60, \"1-per-1s\";q=1;w=1\nRatelimit: \"per_ip\";r=2;t=45, \"1-per-1s\";r=0;t=1\nRetry-After: 1",
	} {
		if got := headers(call(t, f, req(ip, desc("internal", "x"), login))); got != want {
			t.Errorf("call %d: response_headers_to_add\n%s\nwant\n%s", i, got, want)
		}
	}
	// No limited descriptor, no headers.
	if got := headers(call(t, f, req(desc("internal", "x")))); got != "" {
		t.Errorf("unlimited only: headers %q", got)
	}

	legacy := serve(t, nil, &envoyrls.Options{Headers: &ratelimitheader.Options{OmitPolicy: true, Legacy: true}})
	want := "Ratelimit: \"per_ip\";r=2;t=45\nX-Ratelimit-Limit: 3\nX-Ratelimit-Remaining: 2\nX-Ratelimit-Reset: 45"
	if got := headers(call(t, legacy, req(ip))); got != want {
		t.Errorf("legacy: response_headers_to_add\n%s\nwant\n%s", got, want)
	}

	quiet := serve(t, nil, &envoyrls.Options{OmitHeaders: true})
	if resp := call(t, quiet, req(ip)); len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("OmitHeaders: headers %v", resp.GetResponseHeadersToAdd())
	}
	if resp := call(t, quiet, req(ip)); format(resp.GetStatuses()[0]) != "OK 3/MINUTE per_ip r=1 t=45s" {
		t.Errorf("OmitHeaders: status %s", format(resp.GetStatuses()[0]))
	}
}

// failingStore fails every call, as a Redis that is down.
type failingStore struct{}

func (failingStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
}

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	f := serve(t, failingStore{}, nil)
	// The server's default is fail_open; payment is fail_closed. Neither is
	// a gRPC error: fail_closed must deny whatever Envoy's failure_mode_deny.
	run(t, f, []step{
		{req: req(desc("remote_address", "10.0.0.1")), overall: "OK", statuses: []string{"OK"}},
		{req: req(desc("payment", "card")), overall: "OVER_LIMIT", statuses: []string{"OVER_LIMIT 10/SECOND r=0"}},
		{req: req(desc("remote_address", "10.0.0.1"), desc("payment", "card"), desc("internal", "x")), overall: "OVER_LIMIT",
			statuses: []string{"OK", "OVER_LIMIT 10/SECOND r=0", "OK r=4294967295"}},
	})
	// The state is unknown: no RateLimit fields.
	if resp := call(t, f, req(desc("remote_address", "10.0.0.1"))); len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Errorf("headers %v after a store failure", resp.GetResponseHeadersToAdd())
	}
}

// TestAnswerMarks: the gRPC response header says what the message cannot
// (MetadataUnknownDomain, MetadataStoreError), and only when it applies; a
// descriptor of a known domain that matches no rule is not marked.
func TestAnswerMarks(t *testing.T) {
	t.Parallel()
	up, down := serve(t, nil, nil), serve(t, failingStore{}, nil)
	for _, tc := range []struct {
		name          string
		f             fixture
		req           *rlsv3.RateLimitRequest
		unknownDomain string
		storeError    string
	}{
		{"limited", up, req(desc("remote_address", "10.0.0.1")), "", ""},
		{"unknown key of a known domain", up, req(desc("no_such_key", "x")), "", ""},
		{"unknown domain", up, &rlsv3.RateLimitRequest{Domain: "egde", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}}, "true", ""},
		{"store down, fail_open", down, req(desc("remote_address", "10.0.0.1")), "", "fail_open"},
		{"store down, fail_closed", down, req(desc("payment", "card")), "", "fail_closed"},
		{"store down, both", down, req(desc("payment", "card"), desc("remote_address", "10.0.0.1"), desc("payment", "cash")), "", "fail_closed,fail_open"},
		{"store down, no rule", down, req(desc("no_such_key", "x")), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var md metadata.MD
			if _, err := tc.f.client.ShouldRateLimit(t.Context(), tc.req, grpc.Header(&md)); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(md.Get(envoyrls.MetadataUnknownDomain), ";"); got != tc.unknownDomain {
				t.Errorf("%s: %q, want %q", envoyrls.MetadataUnknownDomain, got, tc.unknownDomain)
			}
			if got := strings.Join(md.Get(envoyrls.MetadataStoreError), ";"); got != tc.storeError {
				t.Errorf("%s: %q, want %q", envoyrls.MetadataStoreError, got, tc.storeError)
			}
		})
	}
}
