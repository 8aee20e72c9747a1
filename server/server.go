// Package server is the core of `floodgate serve`: it decides the
// descriptors of a request against the loaded config (the envoyproxy/ratelimit
// model) or a limit given inline, serves the HTTP JSON API, /metrics,
// /healthz and /readyz, and reloads its config without dropping a request.
//
// The Envoy gRPC protocol lives in server/envoyrls, which translates protobuf
// to the types of this package and calls Server.Decide: protobuf types never
// reach the rest of Floodgate.
//
// # Deciding a request
//
// Each descriptor of a request is matched to a rule of its domain
// (config.Config.MatchAll, replaces applied). A descriptor without a rule, or
// whose rule is unlimited or replaced, is OK without asking the store. The
// others are decided by the store, each atomically on its own (as
// envoyproxy/ratelimit does, each descriptor is its own budget), all in one
// round trip when the store can pipeline (floodgate.Pipeliner, which the
// Redis store implements). Unlike envoyproxy/ratelimit, a denied request
// takes nothing (unless the rule sets count_rejected), and a store failure
// is answered within the deadline by the rule's failure mode: fail_open
// allows and counts the event, fail_closed denies, local decides in the
// server's memory with the limit divided by the number of instances (see
// Options.Instances and floodgate.Fallback).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits on what one request may ask, so that a caller cannot make the
// server do unbounded work.
const (
	// MaxDescriptors is the most descriptors in one request.
	MaxDescriptors = 64
	// MaxEntries is the most entries in one descriptor.
	MaxEntries = 64
	// MaxBodyBytes is the largest HTTP request body.
	MaxBodyBytes = 1 << 20
	// DefaultTimeout is the default deadline of a store call: well under the
	// 20 ms that Envoy waits for a rate limit service by default.
	DefaultTimeout = 10 * time.Millisecond
)

// ErrInvalid is wrapped by every error about a request the caller got wrong:
// HTTP 400, gRPC InvalidArgument.
var ErrInvalid = errors.New("invalid request")

// fieldError names the field a caller got wrong.
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string { return e.Field + ": " + e.Msg }
func (e *fieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Options configure a Server. Store is required; the zero value of every
// other field is a working default.
type Options struct {
	// Store decides requests: the memory store or a Redis store.
	Store floodgate.Store
	// Config is the initial config; nil means no rules (only inline limits
	// answer). SetConfig swaps it.
	Config *config.Config
	// FailureMode answers a store failure for a rule without a
	// failure_mode and for inline limits; default fail_open, as Envoy's own
	// rate limit filter defaults to letting traffic through. FailLocal
	// needs Instances and Local.
	FailureMode floodgate.FailurePolicy
	// Instances is the number of replicas of the service sharing the
	// store, which the failure mode local divides every limit by (100 per
	// minute over 4 instances: 25 per minute each while the store is
	// failing; see floodgate.Share). 0 means not set: the failure mode
	// local is then refused (by New for FailureMode, by CheckConfig for a
	// rule).
	Instances int
	// Local is the in-process store of the failure mode local, usually
	// memstore.New(nil); required with Instances. The Server does not
	// close it.
	Local floodgate.Store
	// ProbeInterval is how long the failure mode local decides locally
	// after a store failure before a request probes the store again;
	// default floodgate.DefaultProbeInterval, timed by Clock if set.
	ProbeInterval time.Duration
	// Timeout bounds every store call; default DefaultTimeout.
	Timeout time.Duration
	// Clock, if set, stamps requests with its time instead of letting the
	// store use its own clock (tests).
	Clock floodgate.Clock
	// Logger receives the server's logs; default discards them.
	Logger *slog.Logger
	// Registry receives the server's metrics; default a new registry.
	Registry *prometheus.Registry
	// Pprof serves /debug/pprof/ on the HTTP handler.
	Pprof bool
	// NearLimitRatio is the share of a limit above which an admitted request
	// counts as near the limit in metrics; default 0.8, as upstream.
	NearLimitRatio float64
}

// Server decides requests. It is safe for concurrent use.
type Server struct {
	store    floodgate.Store
	cfg      atomic.Pointer[config.Config]
	loaded   atomic.Bool
	failMode floodgate.FailurePolicy
	timeout  time.Duration
	clock    floodgate.Clock
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	pprof    bool
	near     float64
	fb       *floodgate.Fallback // the failure mode local's; nil without Instances
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("server: New: nil Store")
	}
	s := &Server{
		store:    opts.Store,
		failMode: opts.FailureMode,
		timeout:  opts.Timeout,
		clock:    opts.Clock,
		log:      opts.Logger,
		reg:      opts.Registry,
		pprof:    opts.Pprof,
		near:     opts.NearLimitRatio,
	}
	switch s.failMode {
	case "":
		s.failMode = floodgate.FailOpen
	case floodgate.FailOpen, floodgate.FailClosed, floodgate.FailLocal:
	default:
		return nil, fmt.Errorf("server: New: unknown failure mode %q (want fail_open, fail_closed or local)", s.failMode)
	}
	var err error
	if s.fb, err = newFallback(opts); err != nil {
		return nil, err
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.timeout < 0 {
		return nil, fmt.Errorf("server: New: negative timeout %v", s.timeout)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if s.near <= 0 || s.near > 1 {
		s.near = 0.8
	}
	if s.m, err = newMetrics(s.reg); err != nil {
		return nil, err
	}
	cfg := opts.Config
	if cfg == nil {
		cfg = &config.Config{}
	}
	s.SetConfig(cfg)
	return s, nil
}

// SetConfig swaps in a new config atomically: requests already being
// decided finish with the old one, the next ones use the new one.
func (s *Server) SetConfig(c *config.Config) {
	s.cfg.Store(c)
	s.loaded.Store(true)
	s.m.rules.Set(float64(countRules(c)))
}

// countRules is the number of rules of every domain of c.
func countRules(c *config.Config) int {
	n := 0
	for _, d := range c.Domains() {
		n += len(d.Rules())
	}
	return n
}

// Config returns the config in force.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// Registry returns the registry holding the server's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Logger returns the server's logger.
func (s *Server) Logger() *slog.Logger { return s.log }

// Code is the outcome of one descriptor, as Envoy's RateLimitResponse.Code.
type Code int

const (
	// OK: the descriptor is within its limit, has no limit, or its rule is in
	// shadow mode.
	OK Code = iota + 1
	// OverLimit: the descriptor's limit denied the request, or its store
	// failed and its failure mode is fail_closed.
	OverLimit
)

func (c Code) String() string {
	if c == OverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// Descriptor is one descriptor of a request: entries matched against the
// config, or a limit given by the caller.
type Descriptor struct {
	// Entries are the descriptor's key/value pairs, most general first.
	Entries []config.Entry
	// Limit, if set, overrides the config for this descriptor (Envoy's
	// descriptor-level limit): the descriptor is limited by it, keyed by its
	// entries, and matches no rule, so it neither replaces another
	// descriptor's rule nor is replaced, and is never in shadow mode, as
	// in envoyproxy/ratelimit.
	Limit *floodgate.Limit
	// Hits, if set, is this descriptor's cost instead of the request's; 0
	// checks without consuming.
	Hits *int64
}

// Status is the outcome of one descriptor.
type Status struct {
	// Code is OK or OverLimit.
	Code Code
	// Rule is the matched rule; nil for no rule and for a Limit override.
	Rule *config.Rule
	// Limited reports whether the store decided the descriptor: false when
	// no rule matched, or the rule is unlimited or was replaced.
	Limited bool
	// Limit is the limit applied, when Limited: for a decision of the
	// failure mode local, this instance's share (floodgate.Share).
	Limit floodgate.Limit
	// Decision is the store's decision, when Limited and the store answered.
	Decision floodgate.Decision
	// Shadow reports a denial that shadow mode turned into OK.
	Shadow bool
	// Err is the store's failure, answered by the failure mode; nil when
	// the failure mode local decided in the local store instead (then
	// Decision.Fallback is set and Decision is the local one, with this
	// instance's share of the limit).
	Err error
	// FailureMode is the failure mode that answered Err, or FailLocal for a
	// local decision.
	FailureMode floodgate.FailurePolicy
}

// Result is the outcome of a request: OverLimit if any descriptor is.
type Result struct {
	Code     Code
	Statuses []Status
}

// Decide decides the descriptors of one request of domain, each costing
// hits (unless the descriptor sets its own). An error wraps ErrInvalid and
// names the field when the request is malformed; a store failure is not an
// error but a Status answered by its failure mode.
func (s *Server) Decide(ctx context.Context, domain string, ds []Descriptor, hits int64) (Result, error) {
	if domain == "" {
		return Result{}, invalid("domain", "empty")
	}
	if len(ds) == 0 {
		return Result{}, invalid("descriptors", "empty")
	}
	if len(ds) > MaxDescriptors {
		return Result{}, invalid("descriptors", "%d descriptors, more than the %d allowed", len(ds), MaxDescriptors)
	}
	if hits < 0 || hits > floodgate.MaxLimit {
		return Result{}, invalid("hits", "%d is not between 0 and %d", hits, floodgate.MaxLimit)
	}
	entries := make([][]config.Entry, len(ds))
	for i, d := range ds {
		if len(d.Entries) == 0 {
			return Result{}, invalid(fmt.Sprintf("descriptors[%d].entries", i), "empty")
		}
		if len(d.Entries) > MaxEntries {
			return Result{}, invalid(fmt.Sprintf("descriptors[%d].entries", i), "%d entries, more than the %d allowed", len(d.Entries), MaxEntries)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return Result{}, invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "empty")
			}
		}
		if d.Hits != nil && (*d.Hits < 0 || *d.Hits > floodgate.MaxLimit) {
			return Result{}, invalid(fmt.Sprintf("descriptors[%d].hits", i), "%d is not between 0 and %d", *d.Hits, floodgate.MaxLimit)
		}
		if d.Limit != nil {
			if err := d.Limit.Validate(); err != nil {
				return Result{}, invalid(fmt.Sprintf("descriptors[%d].limit", i), "%v", err)
			}
			if d.Limit.Algorithm == floodgate.Concurrency {
				return Result{}, invalid(fmt.Sprintf("descriptors[%d].limit.algorithm", i), "concurrency limits need a lease; they cannot be checked per request")
			}
		}
		if d.Limit == nil {
			// A descriptor with its own limit matches no rule, as in
			// envoyproxy/ratelimit, where an override is a limit without
			// a name or replaces: it neither replaces nor is replaced.
			entries[i] = d.Entries
		}
	}

	cfg := s.cfg.Load()
	matches := cfg.MatchAll(domain, entries)
	res := Result{Code: OK, Statuses: make([]Status, len(ds))}
	reqs := make([]floodgate.Request, 0, len(ds))
	which := make([]int, 0, len(ds))
	local := make([]bool, 0, len(ds))
	now := s.now()
	for i, d := range ds {
		st := &res.Statuses[i]
		st.Code = OK
		cost := hits
		if d.Hits != nil {
			cost = *d.Hits
		}
		var key string
		switch m := matches[i]; {
		case d.Limit != nil:
			st.Limit = *d.Limit
			key = "d|" + config.Key(domain, d.Entries)
		case m.Rule == nil || m.ReplacedBy != nil || m.Rule.Unlimited:
			st.Rule = m.Rule
			s.m.decision(domain, m.Rule, d.Entries, outcomeUnlimited)
			continue
		case m.Rule.Limit.Algorithm == floodgate.Concurrency:
			// A concurrency rule needs a lease held for the whole request,
			// which this protocol cannot express: it is not enforced here.
			st.Rule = m.Rule
			s.m.decision(domain, m.Rule, d.Entries, outcomeUnlimited)
			continue
		default:
			st.Rule, st.Limit = m.Rule, m.Rule.Limit
			key = "d|" + m.Rule.Key(d.Entries)
		}
		st.Limited = true
		reqs = append(reqs, floodgate.Request{Key: key, Limit: st.Limit, Cost: cost, Now: now})
		which = append(which, i)
		local = append(local, s.failureMode(st.Rule) == floodgate.FailLocal)
	}
	if len(reqs) == 0 {
		return res, nil
	}
	decisions, errs, storeErrs := s.decide(ctx, reqs, local)
	for j, i := range which {
		st := &res.Statuses[i]
		s.settle(domain, ds[i].Entries, st, decisions[j], errs[j], storeErrs[j])
		if st.Code == OverLimit {
			res.Code = OverLimit
		}
	}
	return res, nil
}

// settle turns the store's answer for one descriptor into its Status, and
// records it in metrics and logs. storeErr is the store's failure that a
// local decision (d.Fallback) answered.
func (s *Server) settle(domain string, entries []config.Entry, st *Status, d floodgate.Decision, err, storeErr error) {
	if err == nil && d.Fallback {
		s.settleLocal(domain, entries, st, d, storeErr)
		return
	}
	shadow := st.Rule != nil && st.Rule.ShadowMode
	if err != nil {
		st.Err = err
		st.FailureMode = s.failureMode(st.Rule)
		if st.FailureMode == floodgate.FailLocal {
			// Without Instances (CheckConfig), or the local store failed too.
			st.FailureMode = floodgate.FailClosed
		}
		s.m.storeErrors.Inc()
		if st.FailureMode == floodgate.FailClosed && !shadow {
			st.Code = OverLimit
			s.m.decision(domain, st.Rule, entries, outcomeFailedClosed)
		} else {
			s.m.decision(domain, st.Rule, entries, outcomeFailedOpen)
		}
		s.log.Warn("store failed", "domain", domain, "rule", ruleID(st.Rule), "failure_mode", string(st.FailureMode), "error", err)
		return
	}
	st.Decision = d
	switch {
	case d.Allowed:
		s.m.decision(domain, st.Rule, entries, outcomeAllowed)
		if d.Limit > 0 && float64(d.Limit-d.Remaining) >= s.near*float64(d.Limit) {
			s.m.nearLimit.WithLabelValues(domain, ruleID(st.Rule)).Inc()
		}
	case shadow:
		st.Shadow = true
		s.m.decision(domain, st.Rule, entries, outcomeShadowDenied)
		s.log.Info("shadow mode denial", "domain", domain, "rule", ruleID(st.Rule), "limit", st.Limit.String(), "retry_after", d.RetryAfter)
	default:
		st.Code = OverLimit
		s.m.decision(domain, st.Rule, entries, outcomeDenied)
		s.log.Debug("denied", "domain", domain, "rule", ruleID(st.Rule), "limit", st.Limit.String(),
			"remaining", d.Remaining, "retry_after", d.RetryAfter, "reset_after", d.ResetAfter)
	}
}

// DecideInline decides one key against a limit given by the caller (the HTTP
// API's inline form). Keys of inline limits never meet keys of config rules.
func (s *Server) DecideInline(ctx context.Context, key string, limit floodgate.Limit, cost int64) (Status, error) {
	if key == "" {
		return Status{}, invalid("key", "empty")
	}
	if len(key) > floodgate.MaxKeyLen {
		return Status{}, invalid("key", "%d bytes, more than the %d allowed", len(key), floodgate.MaxKeyLen)
	}
	if cost < 0 || cost > floodgate.MaxLimit {
		return Status{}, invalid("cost", "%d is not between 0 and %d", cost, floodgate.MaxLimit)
	}
	if err := limit.Validate(); err != nil {
		return Status{}, invalid("limit", "%v", err)
	}
	if limit.Algorithm == floodgate.Concurrency {
		return Status{}, invalid("limit.algorithm", "concurrency limits need a lease; they cannot be checked per request")
	}
	st := Status{Code: OK, Limited: true, Limit: limit}
	ds, errs, storeErrs := s.decide(ctx, []floodgate.Request{{Key: "i|" + key, Limit: limit, Cost: cost, Now: s.now()}},
		[]bool{s.failMode == floodgate.FailLocal})
	s.settle("", nil, &st, ds[0], errs[0], storeErrs[0])
	return st, nil
}

// ResetInline forgets the state of an inline key under limit.
func (s *Server) ResetInline(ctx context.Context, key string, limit floodgate.Limit) error {
	if key == "" {
		return invalid("key", "empty")
	}
	if len(key) > floodgate.MaxKeyLen {
		return invalid("key", "%d bytes, more than the %d allowed", len(key), floodgate.MaxKeyLen)
	}
	if err := limit.Validate(); err != nil {
		return invalid("limit", "%v", err)
	}
	r, ok := s.store.(floodgate.Resetter)
	if !ok {
		return fmt.Errorf("server: reset: %w", floodgate.ErrNotSupported)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return r.Reset(ctx, "i|"+key, limit)
}

// apply asks the store, within the deadline, in one round trip when it can.
func (s *Server) apply(ctx context.Context, reqs []floodgate.Request) ([]floodgate.Decision, []error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	start := time.Now()
	var ds []floodgate.Decision
	var errs []error
	if p, ok := s.store.(floodgate.Pipeliner); ok && len(reqs) > 1 {
		ds, errs = p.ApplyPipelined(ctx, reqs)
	} else {
		ds, errs = make([]floodgate.Decision, len(reqs)), make([]error, len(reqs))
		for i, r := range reqs {
			ds[i], errs[i] = s.store.Apply(ctx, r)
		}
	}
	s.m.storeLatency.Observe(time.Since(start).Seconds())
	return ds, errs
}

func (s *Server) now() time.Time {
	if s.clock == nil {
		return time.Time{}
	}
	return s.clock.Now()
}

// Ready reports whether the server can answer: a config is loaded and the
// store answers its ping (a store without floodgate.Pinger is always
// reachable). When the default failure mode is local, an unreachable store
// does not make the server unready: the failure mode exists so that each
// instance goes on deciding with its share of every limit while the shared
// store is down, and every instance of a fleet shares that store, so
// failing readiness would take the whole fleet out of its load balancer at
// once. Status says which of the two a ready server is in.
func (s *Server) Ready(ctx context.Context) error {
	_, err := s.readiness(ctx)
	return err
}

// Status is Ready's answer in words, for /readyz: "ok", or "ok: deciding
// locally, store unreachable: ..." under the default failure mode local.
func (s *Server) Status(ctx context.Context) (string, error) {
	return s.readiness(ctx)
}

func (s *Server) readiness(ctx context.Context) (string, error) {
	if !s.loaded.Load() {
		return "", errors.New("no config loaded")
	}
	if p, ok := s.store.(floodgate.Pinger); ok {
		ctx, cancel := context.WithTimeout(ctx, max(s.timeout, 250*time.Millisecond))
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			if s.failMode == floodgate.FailLocal && s.fb != nil {
				return fmt.Sprintf("ok: failure mode local decides in memory, store unreachable: %v", err), nil
			}
			return "", fmt.Errorf("store unreachable: %w", err)
		}
	}
	return "ok", nil
}

func ruleID(r *config.Rule) string {
	if r == nil {
		return ""
	}
	return r.ID
}
