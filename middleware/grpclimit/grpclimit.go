// Package grpclimit rate limits gRPC servers with a floodgate.Limiter:
// UnaryServerInterceptor and StreamServerInterceptor.
//
//	limiter, _ := floodgate.New(memstore.New(nil), nil)
//	lim, err := grpclimit.New(grpclimit.Config{
//		Limiter: limiter,
//		Limits:  []floodgate.Limit{{Limit: 10, Period: time.Second}},
//	})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()),
//	)
//
// Each unary call, and each stream when it opens (not each message), costs
// one unit of every limit in Config.Limits, checked all or nothing for the
// call's key: by default the peer address (Peer), or a metadata value such
// as an API key (Metadata, stored hashed), or any function of the call. A
// call without a key is answered as MissingKey says: refused with
// InvalidArgument by default, let through, or counted under one shared
// key.
//
// A denied call fails with codes.ResourceExhausted, carrying a
// google.rpc.RetryInfo detail (how long to wait, unless never) and a
// google.rpc.QuotaFailure detail naming the violated policies. When the
// store fails, the Limiter's failure policy decides: floodgate.FailOpen
// lets the call through, floodgate.FailClosed fails it with
// codes.Unavailable, and floodgate.FailLocal decides it in the Limiter's
// local store with this instance's share of each limit, answered like any
// decision (ResourceExhausted on a denial). With SendFields the RateLimit-Policy and RateLimit
// fields of package ratelimitheader also travel as response header
// metadata ("ratelimit-policy", "ratelimit", "retry-after").
//
// With MaxWait, a call that finds no unit free waits for the earliest
// slot within MaxWait instead of failing (floodgate.Limiter.Schedule,
// docs/waiting.md), taken in the store's one atomic step so that calls on
// every instance are served in order and the rate holds; if the call's
// context ends first (its deadline, a cancel), the slot is given back,
// exactly once, and the call fails with the context's status
// (DeadlineExceeded or Canceled). With Priority, each call is decided
// under its class's share of the limits: near the limit, sheddable calls
// fail first, so the last part of the budget is kept for critical ones.
package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/internal/netkey"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
)

// ErrMissingKey is the Result.Err of a call for which the KeyFunc found no
// key.
var ErrMissingKey = errors.New("grpclimit: call has no key")

// KeyFunc names the subject a call is limited as, from its context (peer,
// metadata, the authenticated identity) and its full method name
// ("/pkg.Service/Method"). It returns "" when the call carries no key.
type KeyFunc func(ctx context.Context, fullMethod string) string

// MissingKey says what to do with a call whose KeyFunc returns "".
type MissingKey int

const (
	// DenyMissingKey fails the call with codes.InvalidArgument. It is the
	// default.
	DenyMissingKey MissingKey = iota
	// AllowMissingKey lets the call through without limiting it.
	AllowMissingKey
	// SharedMissingKey counts every keyless call under Config.AnonymousKey.
	SharedMissingKey
)

// Config configures an Interceptor. Limiter and Limits are
// required; every other field has a working zero value.
type Config struct {
	// Limiter decides; its Options set the store, the failure policy and
	// the timeout.
	Limiter *floodgate.Limiter
	// Limits are checked together for every call, all or nothing; each call
	// costs 1 unit of each. At least one; not Concurrency. Names, if set,
	// must be unique.
	Limits []floodgate.Limit
	// Key names the subject; nil means Peer{}.Key.
	Key KeyFunc
	// KeyPrefix is prepended to every key, so that two servers or services
	// on one Limiter count apart. Empty shares.
	KeyPrefix string
	// MissingKey says what a call without a key gets; default
	// DenyMissingKey.
	MissingKey MissingKey
	// AnonymousKey is the key of SharedMissingKey; default "anonymous".
	AnonymousKey string
	// Skip, if set, lets the calls it selects through untouched and
	// uncounted (grpc.health.v1.Health/Check).
	Skip func(ctx context.Context, fullMethod string) bool
	// DryRun decides and reports but never refuses a call.
	DryRun bool
	// SendFields sends the RateLimit fields as response header metadata.
	SendFields bool
	// Deny makes the error a refused call fails with; nil means Status(res).Err().
	Deny func(ctx context.Context, fullMethod string, res Result) error
	// Report, if set, is called with the Result of every call that was not
	// skipped. It must be fast and safe for concurrent use.
	Report func(ctx context.Context, fullMethod string, res Result)
	// MaxWait, above zero, has a call that finds no unit free wait for
	// the earliest slot within MaxWait, at most floodgate.MaxWait, and
	// within the call's deadline, instead of failing (see the package
	// doc). Limits must then be one GCRA or token bucket limit. Each call is then a
	// reservation settled when its slot comes: two calls of the store
	// where a decision is one.
	MaxWait time.Duration
	// Priority, if set, gives each call its class: near the limit, lower
	// classes fail first (floodgate.AllowPriority). "" decides under the
	// whole limits. Every limit must be a GCRA or a fixed window without
	// CountRejected; not with MaxWait (a wait holds the whole limit).
	Priority func(ctx context.Context, fullMethod string) floodgate.Priority
}

// Result is what the interceptor decided for a call. The handler finds it
// with FromContext.
type Result struct {
	// Key is the key sent to the Limiter (with KeyPrefix), "" when the call
	// had none and was not counted under AnonymousKey.
	Key string
	// Limits are the limits checked, Config.Limits.
	Limits []floodgate.Limit
	// Decision is the combined decision, or the failure policy's when Err
	// is set.
	Decision floodgate.Decision
	// Decisions are the decisions of each limit, in the order of Limits;
	// nil when the state is unknown (Err set, or no key).
	Decisions []floodgate.Decision
	// Err is ErrMissingKey, the Limiter's error, or nil.
	Err error
	// DryRun reports that the call passed only because of Config.DryRun.
	DryRun bool
	// Priority is the call's class (Config.Priority); Limits and
	// Decisions are then the class's share of Config.Limits.
	Priority floodgate.Priority
	// Waited is how long the call waited for its slot (Config.MaxWait).
	Waited time.Duration
}

// Violated names the policies that denied the call (by
// ratelimitheader.PolicyName).
func (res Result) Violated() []string {
	return limitcheck.Violated(res.Limits, res.Decisions)
}

// Interceptor holds the interceptors of one Config. It is safe for
// concurrent use.
type Interceptor struct {
	c   Config
	chk limitcheck.Checker
}

// New checks c and returns an Interceptor.
func New(c Config) (*Interceptor, error) {
	chk := limitcheck.Checker{
		Limiter:       c.Limiter,
		Limits:        c.Limits,
		KeyPrefix:     c.KeyPrefix,
		MissingKey:    limitcheck.MissingKey(c.MissingKey),
		AnonymousKey:  c.AnonymousKey,
		ErrMissingKey: ErrMissingKey,
		MaxWait:       c.MaxWait,
		Classes:       c.Priority != nil,
	}
	if err := chk.Init("grpclimit", "call"); err != nil {
		return nil, err
	}
	if c.Key == nil {
		c.Key = Peer{}.Key
	}
	if c.Deny == nil {
		c.Deny = func(_ context.Context, _ string, res Result) error { return Status(res).Err() }
	}
	return &Interceptor{c: c, chk: chk}, nil
}

// UnaryServerInterceptor limits unary calls: one unit per call.
func (l *Interceptor) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if l.c.Skip != nil && l.c.Skip(ctx, info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, err := l.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor limits streams: one unit when a stream opens,
// whatever it carries afterwards.
func (l *Interceptor) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if l.c.Skip != nil && l.c.Skip(ss.Context(), info.FullMethod) {
			return handler(srv, ss)
		}
		ctx, err := l.admit(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// admit decides a call and returns the context for its handler, or the
// error to fail it with.
func (l *Interceptor) admit(ctx context.Context, method string) (context.Context, error) {
	res := l.Check(ctx, method)
	if l.c.SendFields && res.Key != "" && !errors.Is(res.Err, floodgate.ErrInvalidRequest) {
		md := metadata.MD{}
		for _, f := range ratelimitheader.Fields(res.Limits, res.Decisions, nil) {
			md.Set(strings.ToLower(f.Name), f.Value)
		}
		if l.c.DryRun {
			md.Delete("retry-after") // the call goes ahead
		}
		_ = grpc.SetHeader(ctx, md) // fails only outside a server call
	}
	if !res.Decision.Allowed && l.c.DryRun {
		res.DryRun = true
	}
	if l.c.Report != nil {
		l.c.Report(ctx, method, res)
	}
	if res.Decision.Allowed || res.DryRun {
		return context.WithValue(ctx, resultKey{}, res), nil
	}
	return nil, l.c.Deny(ctx, method, res)
}

// Check decides a call without failing it: the key, then every limit. It
// takes from the limits like the interceptors do.
func (l *Interceptor) Check(ctx context.Context, fullMethod string) Result {
	var class floodgate.Priority
	if l.c.Priority != nil {
		class = l.c.Priority(ctx, fullMethod)
	}
	o := l.chk.Check(ctx, l.c.Key(ctx, fullMethod), class)
	res := Result{Key: o.Key, Limits: l.chk.Limits, Decision: o.Decision, Decisions: o.Decisions, Err: o.Err, Priority: class, Waited: o.Waited}
	if o.Limits != nil {
		res.Limits = o.Limits
	}
	return res
}

type resultKey struct{}

// FromContext returns the Result of the interceptor that let the call
// through.
func FromContext(ctx context.Context) (Result, bool) {
	res, ok := ctx.Value(resultKey{}).(Result)
	return res, ok
}

// Status is the status a refused call fails with: ResourceExhausted with
// RetryInfo (unless the call can never pass) and QuotaFailure details for
// a denial; InvalidArgument for a missing or refused key; Unavailable for a
// store failure under floodgate.FailClosed. Messages never carry the key
// or the store's error text.
func Status(res Result) *status.Status {
	switch {
	case errors.Is(res.Err, ErrMissingKey):
		return status.New(codes.InvalidArgument, "grpclimit: the call carries no rate limit key")
	case isClassError(res.Err):
		return status.New(codes.InvalidArgument, "grpclimit: the call's priority class is not valid")
	case errors.Is(res.Err, floodgate.ErrInvalidRequest):
		return status.New(codes.InvalidArgument, "grpclimit: the call's rate limit key is not valid")
	case errors.Is(res.Err, context.Canceled), errors.Is(res.Err, context.DeadlineExceeded):
		return status.FromContextError(res.Err)
	case res.Err != nil:
		return status.New(codes.Unavailable, "grpclimit: the rate limiter is unavailable")
	}
	ra := res.Decision.RetryAfter
	msg := "grpclimit: rate limit exceeded"
	if ra == floodgate.Never {
		msg += "; the call can never be admitted"
	} else if ra > 0 {
		msg += "; retry after " + ra.String()
	}
	st := status.New(codes.ResourceExhausted, msg)
	var details []protoadapt.MessageV1
	if ra > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(ra)})
	}
	qf := &errdetails.QuotaFailure{}
	for _, i := range limitcheck.ViolatedIndexes(res.Limits, res.Decisions) {
		l := res.Limits[i]
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     "policy:" + ratelimitheader.PolicyName(res.Limits, i),
			Description: fmt.Sprintf("at most %d per %v", l.Capacity(), l.Period),
		})
	}
	if len(qf.Violations) > 0 {
		details = append(details, qf)
	}
	if len(details) == 0 {
		return st
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withDetails
}

// isClassError reports an error of the class Config.Priority gave.
func isClassError(err error) bool {
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	return ok && fe.Field == "priority"
}

// Peer keys calls by the peer address of the connection: "ip:" and the
// address, IPv6 grouped by a /64 by default (see httplimit.ClientIP, which
// groups alike). A call over a connection without an IP address (a Unix
// socket, an in-memory listener) has no key. Behind a proxy every call
// has the proxy's address: key on a metadata value the proxy sets instead.
type Peer struct {
	// IPv4Prefix groups IPv4 clients by network; 0 means 32.
	IPv4Prefix int
	// IPv6Prefix groups IPv6 clients by network; 0 means 64.
	IPv6Prefix int
}

// Key is the KeyFunc of p.
func (p Peer) Key(ctx context.Context, _ string) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return ""
	}
	var a netip.Addr
	switch addr := pr.Addr.(type) {
	case *net.TCPAddr:
		a, ok = netip.AddrFromSlice(addr.IP)
	default:
		a, ok = netkey.ParseHostPort(addr.String())
	}
	if !ok {
		return ""
	}
	return netkey.Key(a, p.IPv4Prefix, p.IPv6Prefix)
}

// Metadata keys calls by the first value of the metadata entry name (an
// API key): "metadata:" + the lower-case name + ":" + the hex SHA-256 of
// the value, so the secret never reaches the store's keys. A call without
// the entry, or with an empty value, has no key.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	prefix := "metadata:" + name + ":"
	return func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		vs := md.Get(name)
		if len(vs) == 0 || vs[0] == "" {
			return ""
		}
		sum := sha256.Sum256([]byte(vs[0]))
		return prefix + hex.EncodeToString(sum[:])
	}
}
