// Package envoyrls serves Envoy's rate limit service protocol,
// envoy.service.ratelimit.v3.RateLimitService, over gRPC, and over HTTP as
// the POST /json endpoint of envoyproxy/ratelimit. It only translates: the
// protobuf request becomes server.Descriptors for server.Server.Decide, and
// the server.Statuses it returns become the protobuf response. Protobuf
// types go no further into Floodgate than this package.
//
// Most callers want Register, and JSONHandler for the HTTP side:
//
//	g := grpc.NewServer()
//	envoyrls.Register(g, srv)
//	api, err := httpapi.New(srv, nil) // server/httpapi
//	h := api.Handler(map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)})
//
// Behaviour follows envoyproxy/ratelimit (src/service/ratelimit.go,
// src/limiter/base_limiter.go, src/utils/utilities.go and
// src/config/config_impl.go), so that Envoy, and any client written for
// that service, can use Floodgate unchanged. [docs/service.md] describes
// every field of the request and the response, and where this package
// does otherwise and why. The invariants:
//
//   - Invalid input (an empty domain, no descriptors, more than
//     server.MaxDescriptors descriptors or server.MaxEntries entries, an
//     empty key, is_negative_hits, a limit override of an unknown unit) is
//     a gRPC InvalidArgument whose message starts with the field
//     ("descriptors[1].entries[0].key: empty") and whose details carry an
//     errdetails.BadRequest naming it. A descriptor whose rule is a
//     concurrency limit is InvalidArgument too: this protocol has no
//     release.
//   - hits_addend is what each descriptor costs, 0 meaning 1; a
//     descriptor's own hits_addend replaces it, 0 checking without
//     consuming. A denied request consumes nothing unless its rule sets
//     count_rejected.
//   - There is one status per descriptor, in the request's order.
//     overall_code is OVER_LIMIT if any descriptor is, but for quotas
//     (quota_mode), which deny only when every quota of the request is
//     over; global shadow mode then answers OK.
//   - A store failure is answered by the rule's failure mode, never by a
//     gRPC error: Envoy answers an error by its own failure_mode_deny,
//     false by default, which would let through the traffic a fail_closed
//     rule is there to stop.
//   - A request's priority class travels as a descriptor entry: in a
//     domain whose config names a priority_key, the entry of that key is
//     taken off the descriptor before matching and its value is the
//     class, held to the matched rule's priority_max (by default the
//     rule's own class, so a caller can lower its class, not raise it);
//     an unknown value is the lowest class, never an error (see
//     docs/waiting.md). The protocol itself has no field for a class.
//   - unit is SECOND to YEAR only when the limit's period is exactly one of
//     them, else UNKNOWN, so that no reader advertises a wrong window;
//     counts are capped at 4294967295, upstream's uint32.
//   - Unless Options.OmitHeaders is set, response_headers_to_add carries
//     the RateLimit-Policy and RateLimit fields of package
//     ratelimitheader, and Retry-After when a retry can succeed;
//     Options.UpstreamHeaders answers upstream's three fields instead, and
//     Options.DynamicMetadata fills dynamic_metadata as upstream's
//     RESPONSE_DYNAMIC_METADATA.
//
// The HTTP endpoint is described at JSONHandler.
//
// [docs/service.md]: https://github.com/floodgate-rl/floodgate/blob/main/docs/service.md#the-envoy-protocol-field-by-field
package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"go.opentelemetry.io/otel/trace"
)

// Options configure a Service. A nil *Options, or the zero value, is the
// default: response headers on, in the draft's form only.
type Options struct {
	// OmitHeaders leaves response_headers_to_add empty (and, on POST /json,
	// the HTTP response without RateLimit fields), for deployments where
	// Envoy or the application sets its own.
	OmitHeaders bool
	// Headers chooses the fields besides RateLimit and Retry-After: leave out
	// RateLimit-Policy, or add the legacy X-RateLimit-* trio. Nil writes
	// RateLimit-Policy, RateLimit and, on a denial, Retry-After.
	Headers *ratelimitheader.Options
	// UpstreamHeaders, when set (and OmitHeaders is not), makes
	// response_headers_to_add upstream's three fields instead of
	// Floodgate's (see UpstreamHeaders), and leaves POST /json's HTTP
	// response without header fields of its own, as upstream's.
	UpstreamHeaders *UpstreamHeaders
	// DynamicMetadata fills the response's dynamic_metadata as upstream
	// does with RESPONSE_DYNAMIC_METADATA=true (off by default there and
	// here); see DynamicMetadata.
	DynamicMetadata bool
}

// Service implements envoy.service.ratelimit.v3.RateLimitService on a
// server.Server. It is safe for concurrent use. Most callers want Register.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	srv  *server.Server
	opts Options
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// New returns a Service deciding with srv. A nil opts means the defaults.
func New(srv *server.Server, opts *Options) *Service {
	s := &Service{srv: srv}
	if opts != nil {
		s.opts = *opts
		if opts.Headers != nil {
			h := *opts.Headers
			s.opts.Headers = &h
		}
		if opts.UpstreamHeaders != nil {
			u := *opts.UpstreamHeaders
			s.opts.UpstreamHeaders = &u
		}
	}
	return s
}

// Register registers a Service with the default options on g (a
// *grpc.Server), so that g answers Envoy's rate limit calls by deciding with
// srv. For other options, register New(srv, opts) with
// rlsv3.RegisterRateLimitServiceServer.
func Register(g grpc.ServiceRegistrar, srv *server.Server) {
	rlsv3.RegisterRateLimitServiceServer(g, New(srv, nil))
}

// ShouldRateLimit decides the descriptors of req; see the package doc. A
// malformed request is an InvalidArgument error; a denial, and a store
// failure, are answers, never errors.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if tr := s.srv.Tracer(); tr != nil {
		// The call's span, continuing Envoy's trace context; the
		// decision's is its child.
		var span trace.Span
		ctx, span = tr.GRPC(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
		resp, err := s.shouldRateLimit(ctx, req)
		tracing.EndGRPC(span, err)
		return resp, err
	}
	return s.shouldRateLimit(ctx, req)
}

func (s *Service) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, res, err := s.decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	if md := answerMarks(res); md != nil {
		// Only on the rare answers that need it: a header costs an
		// allocation per call. An error sending it (the stream is gone)
		// leaves the answer as it is.
		_ = grpc.SetHeader(ctx, metadata.New(md))
	}
	return resp, nil
}

// Names of the gRPC response header fields (initial metadata) that say
// what an answer alone cannot, for a client that reads them (floodgate
// bench, grpcurl -v). Envoy's rate limit filter reads only the response
// message, so they change nothing of its decision and never reach the
// downstream client, unlike response_headers_to_add; the message itself
// stays what upstream answers (code OK and no current_limit for a
// descriptor no rule limits, or one the failure mode fail_open let
// through).
const (
	// MetadataUnknownDomain is "true" when the request's domain is not
	// in the config (server.Result.UnknownDomain): no rule applied.
	// Absent for a known domain, also when none of its rules matched.
	MetadataUnknownDomain = "floodgate-unknown-domain"
	// MetadataStoreError names the failure modes that answered some
	// descriptor of the request because the store failed or timed out,
	// comma separated in the request's order ("fail_open",
	// "fail_closed", "local"); absent when the store answered every one.
	// A full memory store and a failed ledger deny whatever the failure
	// mode and are not marked.
	MetadataStoreError = "floodgate-store-error"
)

// answerMarks is the header fields of MetadataUnknownDomain and
// MetadataStoreError for res, or nil when neither applies.
func answerMarks(res server.Result) map[string]string {
	var md map[string]string
	if res.UnknownDomain {
		md = map[string]string{MetadataUnknownDomain: "true"}
	}
	if policies := storeFailures(res.Statuses); policies != "" {
		if md == nil {
			md = make(map[string]string, 1)
		}
		md[MetadataStoreError] = policies
	}
	return md
}

// storeFailures is the failure modes that answered statuses for a
// failing store, each once, comma separated; "" when none did.
func storeFailures(statuses []server.Status) string {
	var out []string
	for _, st := range statuses {
		var p string
		switch {
		case st.Decision.Fallback:
			p = string(floodgate.FailLocal)
		case st.Err == nil, errors.Is(st.Err, ledger.ErrLedger), errors.Is(st.Err, memstore.ErrFull):
			continue
		default:
			p = string(st.FailurePolicy)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

// decide translates req, decides it and translates the result back; the
// result is returned as well for the HTTP handler's header fields and the
// marks of answerMarks.
// The request's shape (the domain, the number of descriptors and of
// their entries, empty keys) is Server.Decide's to check, once; this
// checks only what the translation needs (hits that fit an int64, an
// override's unit) and what Descriptors cannot say (is_negative_hits).
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, server.Result, error) {
	domain, pds := req.GetDomain(), req.GetDescriptors()
	// Upstream applies a limit override only in a domain it knows. (A reload
	// between this look and Decide's may decide one request by the other
	// config's domains; it cannot mix two configs' rules.)
	knownDomain := s.srv.Config().Domain(domain) != nil

	n := 0
	for _, pd := range pds {
		n += len(pd.GetEntries())
	}
	// A request of one descriptor of a few entries (Envoy's usual) has
	// its descriptor and its entries in one allocation; another, one
	// array for the descriptors and one for the entries of them all. (The
	// server's Decide keeps neither, but escape analysis cannot tell: its
	// plan holds them beside what it hands the store.) One more holds
	// the costs, only when a descriptor has its own.
	var (
		all []config.Entry
		ds  []server.Descriptor
	)
	if len(pds) == 1 && n <= maxOneEntries {
		one := new(oneDescriptor)
		all, ds = one.entries[:0], one.d[:]
	} else {
		all, ds = make([]config.Entry, 0, n), make([]server.Descriptor, len(pds))
	}
	var hitsOf []int64
	for i, pd := range pds {
		if pd.GetIsNegativeHits() {
			return nil, server.Result{}, server.Invalid(fmt.Sprintf("descriptors[%d].is_negative_hits", i), "returning hits to the budget is not supported")
		}
		if h := pd.GetHitsAddend(); h != nil {
			if h.GetValue() > uint64(floodgate.MaxLimit) {
				return nil, server.Result{}, server.Invalid(fmt.Sprintf("descriptors[%d].hits_addend", i), "%d is more than the %d allowed", h.GetValue(), floodgate.MaxLimit)
			}
			if hitsOf == nil {
				hitsOf = make([]int64, len(pds))
			}
			hitsOf[i] = int64(h.GetValue())
			ds[i].Hits = &hitsOf[i]
		}
		if o := pd.GetLimit(); o != nil {
			lim, err := overrideLimit(o, i)
			if err != nil {
				return nil, server.Result{}, err
			}
			if knownDomain {
				ds[i].Limit = &lim
			}
		}
		start := len(all)
		for _, e := range pd.GetEntries() {
			all = append(all, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ds[i].Entries = all[start:len(all):len(all)]
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	res, err := s.srv.Decide(ctx, domain, ds, hits)
	if err != nil {
		return nil, server.Result{}, err
	}
	resp := s.response(res)
	if s.opts.DynamicMetadata {
		resp.DynamicMetadata = DynamicMetadata(req, res.Statuses)
	}
	return resp, res, nil
}

// oneDescriptor is the translated descriptor of a request of one
// descriptor, with room for its entries.
type oneDescriptor struct {
	d       [1]server.Descriptor
	entries [maxOneEntries]config.Entry
}

// maxOneEntries is how many entries a oneDescriptor has room for: an
// Envoy descriptor holds a few (one per action of its rate_limits).
const maxOneEntries = 4

// oneStatus is the whole response to a request of one descriptor, the
// common case, with room for its header fields: one allocation.
type oneStatus struct {
	resp    rlsv3.RateLimitResponse
	ptr     [1]*rlsv3.RateLimitResponse_DescriptorStatus
	slab    [1]statusSlab
	headers headerSlab
}

// response translates the server's result.
func (s *Service) response(res server.Result) *rlsv3.RateLimitResponse {
	n := len(res.Statuses)
	// Allocations are most of what the service adds to gRPC's own cost
	// (the garbage collector's work grows with them): a response to one
	// descriptor is one allocation with its status, current limit,
	// duration until reset and header fields; to several, one for every
	// status with its current limit and duration, and one for their
	// pointers.
	var (
		resp *rlsv3.RateLimitResponse
		slab []statusSlab
		hs   *headerSlab
	)
	if n == 1 {
		one := new(oneStatus)
		resp, slab, hs = &one.resp, one.slab[:], &one.headers
		resp.Statuses = one.ptr[:]
	} else {
		slab = make([]statusSlab, n)
		resp = &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	}
	resp.OverallCode = code(res.Code)
	for i, st := range res.Statuses {
		sl := &slab[i]
		ds := &sl.status
		resp.Statuses[i] = ds
		ds.Code = code(st.Code)
		switch {
		case !st.Limited:
			if st.Rule != nil && st.Rule.Unlimited {
				ds.LimitRemaining = math.MaxUint32
			}
		case st.Err != nil:
			if st.Code == server.OverLimit {
				ds.CurrentLimit = sl.currentLimit(st.Limit)
			}
		default:
			ds.CurrentLimit = sl.currentLimit(st.Limit)
			ds.LimitRemaining = clampUint32(st.Decision.Remaining)
			sl.reset.Seconds = ratelimitheader.Seconds(st.Decision.ResetAfter)
			ds.DurationUntilReset = &sl.reset
		}
	}
	switch {
	case s.opts.OmitHeaders:
	case s.opts.UpstreamHeaders != nil:
		resp.ResponseHeadersToAdd = upstreamHeaders(s.opts.UpstreamHeaders, res, resp.Statuses)
	default:
		resp.ResponseHeadersToAdd = s.headers(res.Statuses, hs)
	}
	return resp
}

// headerSlab holds the header fields of a response, so that the fields
// of a response of one descriptor come with its allocation; three is
// RateLimit-Policy, RateLimit and Retry-After.
type headerSlab struct {
	values [3]corev3.HeaderValue
	ptrs   [3]*corev3.HeaderValue
}

// statusSlab holds the messages of one descriptor's status, so that a
// response allocates them all at once.
type statusSlab struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// currentLimit fills the slab's current limit with l and returns it.
func (sl *statusSlab) currentLimit(l floodgate.Limit) *rlsv3.RateLimitResponse_RateLimit {
	sl.limit.Name, sl.limit.RequestsPerUnit, sl.limit.Unit = l.Name, clampUint32(l.Limit), unitOf(l.Period)
	if l.IsCalendar() {
		// A calendar window is its unit (MONTH); duration_until_reset
		// is the true end of the window.
		sl.limit.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(string(l.Calendar.Unit))])
	}
	return &sl.limit
}

// maxStackHeaders is how many limited descriptors headers gathers without
// allocating: Envoy's requests hold a few.
const maxStackHeaders = 4

// headers returns the RateLimit fields of the statuses the store answered,
// in slab when it is not nil and they fit.
func (s *Service) headers(statuses []server.Status, slab *headerSlab) []*corev3.HeaderValue {
	var limitBuf [maxStackHeaders]floodgate.Limit
	var decisionBuf [maxStackHeaders]floodgate.Decision
	limits, ds := limitBuf[:0], decisionBuf[:0]
	for _, st := range statuses {
		if !st.Limited || st.Err != nil {
			continue
		}
		d := st.Decision
		if st.Shadow {
			d.Allowed, d.RetryAfter = true, 0
		}
		limits = append(limits, st.Limit)
		ds = append(ds, d)
	}
	var fieldBuf [ratelimitheader.MaxFields]ratelimitheader.Field
	fields := ratelimitheader.AppendFields(fieldBuf[:0], limits, ds, s.opts.Headers)
	if len(fields) == 0 {
		return nil
	}
	var hs []corev3.HeaderValue
	var out []*corev3.HeaderValue
	if slab != nil && len(fields) <= len(slab.values) {
		hs, out = slab.values[:len(fields)], slab.ptrs[:len(fields)]
	} else {
		hs, out = make([]corev3.HeaderValue, len(fields)), make([]*corev3.HeaderValue, len(fields))
	}
	for i, f := range fields {
		hs[i].Key, hs[i].Value = f.Name, f.Value
		out[i] = &hs[i]
	}
	return out
}

func code(c server.Code) rlsv3.RateLimitResponse_Code {
	if c == server.OverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// unitOf is the unit whose length is exactly p (config's table of units,
// upstream's lengths), or UNKNOWN.
func unitOf(p time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	name, ok := config.UnitOf(p)
	if !ok {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	return unitByName[name]
}

// unitByName is the response's unit of each of config's unit names (in
// lower case, as UnitOf gives them): the enum's names in lower case, so
// that no answer converts a name's case.
var unitByName = func() map[string]rlsv3.RateLimitResponse_RateLimit_Unit {
	m := make(map[string]rlsv3.RateLimitResponse_RateLimit_Unit, len(rlsv3.RateLimitResponse_RateLimit_Unit_value))
	for name, v := range rlsv3.RateLimitResponse_RateLimit_Unit_value {
		m[strings.ToLower(name)] = rlsv3.RateLimitResponse_RateLimit_Unit(v)
	}
	return m
}()

// unitLength is the length of a unit, or 0 for UNKNOWN and numbers that are
// no unit. The override's envoy.type.v3.RateLimitUnit numbers its units as
// the response's enum does, which also has WEEK (7): upstream converts one
// to the other by number, and so does this.
func unitLength(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	name, ok := rlsv3.RateLimitResponse_RateLimit_Unit_name[int32(u)]
	if !ok {
		return 0
	}
	length, _ := config.UnitLength(name) // 0 for UNKNOWN
	return length
}

// overrideLimit converts descriptors[i].limit.
func overrideLimit(o *commonv3.RateLimitDescriptor_RateLimitOverride, i int) (floodgate.Limit, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	length := unitLength(unit)
	if length == 0 {
		return floodgate.Limit{}, server.Invalid(fmt.Sprintf("descriptors[%d].limit.unit", i), "%s is not a unit (want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)", unit)
	}
	period := length
	if m := o.GetUnitMultiplier(); m != nil {
		switch n := m.GetValue(); {
		case n == 0:
			return floodgate.Limit{}, server.Invalid(fmt.Sprintf("descriptors[%d].limit.unit_multiplier", i), "0; want at least 1")
		case time.Duration(n) > floodgate.MaxPeriod/length:
			return floodgate.Limit{}, server.Invalid(fmt.Sprintf("descriptors[%d].limit.unit_multiplier", i), "%d %s is longer than the longest period, %v", n, unit, floodgate.MaxPeriod)
		default:
			period = time.Duration(n) * length
		}
	}
	return floodgate.Limit{
		Algorithm: floodgate.FixedWindow,
		Limit:     int64(o.GetRequestsPerUnit()),
		Period:    period,
		Window:    floodgate.Aligned,
	}, nil
}

func clampUint32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// grpcError maps an error of decide to a gRPC status: InvalidArgument, with
// an errdetails.BadRequest naming the field, for the caller's mistakes. Its
// message is "field: problem".
func grpcError(err error) error {
	if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
		st := status.New(codes.InvalidArgument, fe.Field+": "+fe.Problem)
		if d, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: fe.Field, Description: fe.Problem}},
		}); derr == nil {
			st = d
		}
		return st.Err()
	}
	switch {
	case errors.Is(err, floodgate.ErrInvalidRequest), errors.Is(err, floodgate.ErrInvalidLimit):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
