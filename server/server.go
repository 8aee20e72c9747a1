// Package server is the engine of `floodgate serve`: it decides the
// descriptors of a request against the loaded config (the envoyproxy/ratelimit
// model) or a limit given inline, holds reservations and leases, counts
// what it decides in Prometheus metrics, answers readiness, and reloads its
// config without dropping a request. It speaks no protocol: server/httpapi
// serves the HTTP JSON API over it, server/envoyrls Envoy's gRPC protocol
// (and POST /json), server/rlqs Envoy's quota protocol, and
// server/transport holds what is between them and the network (tokens,
// TLS, listener bounds). Protobuf types never reach this package.
//
// # Deciding a request
//
// A request takes one path from the edge to the store. An edge (the HTTP
// API's POST /v1/allow, or server/envoyrls: gRPC and POST /json)
// translates its body into Descriptors (or an inline limit) and calls
// Server.Decide (DecideInline), which checks the request's shape, once,
// for every edge, matches
// each descriptor to a rule of its domain (config.Config.MatchAll,
// replaces applied), and asks the server's floodgate.Limiter to decide the
// limited ones with Limiter.Decide: validation, the deadline, the store
// call (all descriptors in one round trip when the store can pipeline, as
// the Redis store does, down to its Lua script), each rule's failure mode,
// and observation all happen there, once, as in the library. The server
// then turns each Outcome into a Status, with metrics and logs, and the
// edge into its answer.
//
// A descriptor without a rule, or whose rule is unlimited or replaced, is
// OK without asking the store. The others are decided all or nothing: a
// request that one descriptor denies takes nothing from any (unless a rule
// sets count_rejected), where envoyproxy/ratelimit counts every
// descriptor of a denied request, even the denied one;
// Options.IndependentDescriptors decides each on its own, as upstream
// does (but a denied descriptor still takes nothing from its own budget).
// A store failure is answered within the deadline by the rule's failure
// mode: fail_open allows and counts the event,
// fail_closed denies, local decides in the server's memory with the limit
// divided by the number of instances (see Options.Limiter and
// floodgate.FailLocal).
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits on what one request may ask, so that a caller cannot make the
// server do unbounded work.
const (
	// MaxDescriptors is the most descriptors in one request.
	MaxDescriptors = 64
	// MaxEntries is the most entries in one descriptor.
	MaxEntries = 64
	// DefaultTimeout is the default deadline of a store call: well under the
	// 20 ms that Envoy waits for a rate limit service by default.
	DefaultTimeout = 10 * time.Millisecond
)

// DefaultMaxOwnPeriod is Options.MaxOwnPeriod's default: 31 days, which
// holds a monthly quota.
const DefaultMaxOwnPeriod = 31 * 24 * time.Hour

// checkOwnPeriod refuses the period of a limit a request brings above
// Options.MaxOwnPeriod, naming field.
func (s *Server) checkOwnPeriod(field string, period time.Duration) error {
	if s.maxPeriod > 0 && period > s.maxPeriod {
		return Invalid(field, "%v is above this server's maximum for a request's own limit, %v (floodgate serve -max-own-period)", period, s.maxPeriod)
	}
	return nil
}

// ownPeriod is the period checkOwnPeriod bounds for limit l: Period, or
// for a calendar limit the calendar days of its longest window (a day,
// 7 days, 31 days, 366 days; the hour a change of daylight saving time
// adds is not counted, so that a month passes the default maximum).
func ownPeriod(l floodgate.Limit) time.Duration {
	const day = 24 * time.Hour
	switch l.Calendar.Unit {
	case floodgate.CalendarDay:
		return day
	case floodgate.CalendarWeek:
		return 7 * day
	case floodgate.CalendarMonth:
		return 31 * day
	case floodgate.CalendarYear:
		return 366 * day
	}
	return l.Period
}

// Invalid is the error of a field of a request the caller got wrong: a
// *floodgate.FieldError of floodgate.ErrInvalidRequest naming field as
// the caller wrote it ("descriptors[1].entries[0].key"), which the
// HTTP API answers 400 and gRPC InvalidArgument.
func Invalid(field, format string, args ...any) error {
	return &floodgate.FieldError{Kind: floodgate.ErrInvalidRequest, Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Options configure a Server. Store is required; the zero value of every
// other field is a working default.
type Options struct {
	// Store decides requests: the memory store or a Redis store.
	Store floodgate.Store
	// Limiter configures the floodgate.Limiter through which the server
	// decides every descriptor and inline limit: the deadline (Timeout;
	// default DefaultTimeout, where the library's is none), Clock, and the
	// failure policy. FailurePolicy answers store failures for rules
	// without a failure_mode and for inline limits; default
	// floodgate.FailOpen, as Envoy's own rate limit filter defaults to
	// letting traffic through (the library's default is FailClosed).
	// Local and Instances make the failure mode local available, to the
	// default and to rules that name it (100 per minute over 4 instances:
	// 25 per minute each while the store is failing; see floodgate.Share);
	// without them a rule with failure_mode local is refused by
	// CheckConfig. Observer, if set, sees every decision beside the
	// server's metrics.
	Limiter floodgate.Options
	// Config is the initial config; nil means no rules (only inline limits
	// answer). SetConfig swaps it.
	Config *config.Config
	// Logger receives the server's logs; default discards them.
	Logger *slog.Logger
	// Registry receives the server's metrics; default a new registry.
	Registry *prometheus.Registry
	// NearLimitRatio is the share of a limit above which an admitted request
	// counts as near the limit in metrics; default 0.8, as upstream.
	NearLimitRatio float64
	// IndependentDescriptors decides each descriptor of a request on its
	// own, as envoyproxy/ratelimit does: a request denied by one descriptor
	// still spends the others' budget. By default the limited descriptors
	// of a request are decided all or nothing (floodgate.Limiter.DecideAll):
	// a request one descriptor denies takes nothing from the others.
	IndependentDescriptors bool
	// GlobalShadowMode answers OK to every request its limits deny, as
	// envoyproxy/ratelimit's SHADOW_MODE does: the decisions are made and
	// counted as ever (each descriptor's status still says OVER_LIMIT, and
	// the RateLimit headers are there), only the overall answer is OK;
	// floodgate_global_shadow_mode_total counts them. A request denied by
	// a failure mode (fail_closed) stays denied: upstream answers a store
	// failure with an error, which Envoy's failure_mode_deny denies.
	GlobalShadowMode bool
	// GlobalQuotaMode makes every descriptor of every request a quota, as
	// envoyproxy/ratelimit's QUOTA_MODE does for the rules' quota_mode:
	// see QuotaCode. Descriptors of unlimited rules are never quotas.
	GlobalQuotaMode bool
	// MaxOwnPeriod bounds the period of a limit a request brings (an
	// inline limit of the HTTP API, Envoy's per-descriptor override): a
	// longer one is refused as invalid, since each of its keys is kept
	// that long. 0 means DefaultMaxOwnPeriod; negative, no bound beyond
	// floodgate.MaxPeriod. The config's rules are not bound by it.
	MaxOwnPeriod time.Duration
	// ConfigLoader is how NewReloader loads the config files; the zero
	// value is upstream's default (a domain in one file only), and
	// MergeDomains merges a domain's files (upstream's MERGE_DOMAIN_CONFIG).
	ConfigLoader config.Loader
	// Tracer, if set, makes a span of every decision and reservation,
	// with the store's call as a child (see server/tracing); nil traces
	// nothing and costs nothing.
	Tracer *tracing.Tracer
}

// Server decides requests. It is safe for concurrent use.
type Server struct {
	lim      *floodgate.Limiter
	failMode floodgate.FailurePolicy // the default policy
	local    bool                    // the failure mode local is available
	timeout  time.Duration
	cfg      atomic.Pointer[config.Config]
	loaded   atomic.Bool
	log      *slog.Logger
	reg      *prometheus.Registry
	m        *metrics
	near     float64
	// independent: Options.IndependentDescriptors.
	independent bool
	maxPeriod   time.Duration // Options.MaxOwnPeriod; 0: none
	shadowAll   bool          // Options.GlobalShadowMode
	quotaAll    bool          // Options.GlobalQuotaMode
	loader      config.Loader // Options.ConfigLoader
	// ledger is the ledger of Options.Store when it is a ledger.Quotas,
	// under ledgerPolicy; nil without.
	ledger       ledger.Ledger
	ledgerPolicy floodgate.FailurePolicy
	// throttle keeps repeated warnings (a store outage) to one line per
	// rule a second.
	throttle *logThrottle
	// overrides are the limits set through the admin API in place of
	// rules' (overrides.go); nil for none.
	overrides atomic.Pointer[overrideSet]
	tr        *tracing.Tracer // Options.Tracer; nil: tracing off
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Store == nil {
		return nil, errors.New("server: New: nil Store")
	}
	s := &Server{log: opts.Logger, reg: opts.Registry, near: opts.NearLimitRatio, independent: opts.IndependentDescriptors,
		maxPeriod: opts.MaxOwnPeriod, shadowAll: opts.GlobalShadowMode, quotaAll: opts.GlobalQuotaMode, loader: opts.ConfigLoader,
		throttle: newLogThrottle(time.Second), tr: opts.Tracer}
	switch {
	case s.maxPeriod == 0:
		s.maxPeriod = DefaultMaxOwnPeriod
	case s.maxPeriod < 0:
		s.maxPeriod = 0
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
	var err error
	if s.m, err = newMetrics(s.reg); err != nil {
		return nil, err
	}
	lo := opts.Limiter
	if lo.FailurePolicy == "" {
		lo.FailurePolicy = floodgate.FailOpen
	}
	if lo.Timeout == 0 {
		lo.Timeout = DefaultTimeout
	}
	lo.Observer = storeObserver{m: s.m, next: lo.Observer}
	if s.lim, err = floodgate.New(opts.Store, &lo); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.failMode, s.local, s.timeout = lo.FailurePolicy, lo.Local != nil, lo.Timeout
	store := opts.Store
	if q, ok := store.(*ledger.Quotas); ok {
		s.ledger, s.ledgerPolicy, store = q.Ledger(), q.Policy(), q.Store()
	}
	if err := registerRegion(s.reg, store); err != nil {
		return nil, err
	}
	if s.ledger != nil {
		if err := registerLedger(s.reg, s.ledger); err != nil {
			return nil, err
		}
	}
	cfg := opts.Config
	if cfg == nil {
		cfg = &config.Config{}
	}
	s.SetConfig(cfg)
	return s, nil
}

// CheckConfig reports the rules of c that the server cannot serve as
// written: a failure_mode local when the server has no local store, and a
// durable quota when it has no ledger. The Reloader rejects such a
// config; a config set by SetConfig anyway has the first answer store
// failures as fail_closed, and the second answered as invalid.
func (s *Server) CheckConfig(c *config.Config) error {
	var errs []error
	for _, d := range c.Domains() {
		for _, r := range d.Rules() {
			if r.FailurePolicy == floodgate.FailLocal && !s.local {
				errs = append(errs, fmt.Errorf("%s:%d: rule %s: failure_mode local needs the number of instances (floodgate serve -instances)", r.File, r.Line, r.ID))
			}
			if r.Limit.Durable && s.ledger == nil {
				errs = append(errs, fmt.Errorf("%s:%d: rule %s: a durable quota needs a ledger (floodgate serve -ledger)", r.File, r.Line, r.ID))
			}
		}
	}
	return errors.Join(errs...)
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

// Limiter returns the Limiter the server decides through.
func (s *Server) Limiter() *floodgate.Limiter { return s.lim }

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
	// Priority is the descriptor's class (floodgate.Item.Priority): its
	// limits are decided with their capacity lowered by the class's
	// reserve (the rule's config.Rule.Reserves, or the default ones).
	// Empty means the class an entry of the domain's
	// config.Domain.PriorityKey carries, held to the rule's PriorityMax
	// (classes.go), else the matched rule's default class
	// (config.Rule.Priority), and no class when the rule has none or the
	// descriptor has its own Limit and carries none. A class given here
	// that the limit cannot honour is invalid (field
	// "descriptors[i].priority").
	Priority floodgate.Priority
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
	// Quota reports a descriptor decided as a quota: its rule has
	// quota_mode, or Options.GlobalQuotaMode is set and the descriptor is
	// not of an unlimited rule. Its Code stays OverLimit when it is over;
	// QuotaCode says what that does to the request.
	Quota bool
	// Err is the store's failure, answered by the failure mode; nil when
	// the failure mode local decided in the local store instead (then
	// Decision.Fallback is set and Decision is the local one, with this
	// instance's share of the limit).
	Err error
	// FailurePolicy is the failure policy that answered Err, or FailLocal
	// for a local decision.
	FailurePolicy floodgate.FailurePolicy
	// Limits is, for a descriptor decided by several limits (a rule's
	// rate_limits, or an override's), the outcome of each in order; the
	// fields above are then those of the most restrictive (see
	// Restrictive), and Code is OverLimit if any limit denied. Nil for
	// one limit.
	Limits []LimitStatus
	// Override reports that an override (SetOverrides) gave the
	// descriptor its limits in place of its rule's; Plan names the
	// override's plan, "" for explicit limits.
	Override bool
	Plan     string
}

// Result is the outcome of a request: OverLimit if any descriptor is, but
// for quotas (see QuotaCode).
type Result struct {
	Code     Code
	Statuses []Status
	// GlobalShadow reports an OK that Options.GlobalShadowMode made of
	// a request its limits denied; the Statuses keep their denials.
	GlobalShadow bool
	// UnknownDomain reports a request whose domain the config does not
	// have: no descriptor matched a rule (a descriptor with its own Limit
	// is still decided by it), which is most often a typo in the domain.
	// The server logs it as a warning naming the domain, at most one line
	// a second.
	UnknownDomain bool
}

// Decide decides the descriptors of one request of domain, each costing
// hits (unless the descriptor sets its own), in four steps: check the
// request's shape, match each descriptor to a rule, decide the limited
// ones together through the Limiter (one round trip, each answered by its
// rule's failure mode), and turn each outcome into a Status. An error
// wraps floodgate.ErrInvalidRequest or ErrInvalidLimit, and errors.As finds
// a *floodgate.FieldError naming the field, when the request is malformed;
// a store failure is not an error but a Status answered by its failure
// mode.
func (s *Server) Decide(ctx context.Context, domain string, ds []Descriptor, hits int64) (Result, error) {
	if s.tr != nil {
		return s.decideTraced(ctx, domain, ds, hits)
	}
	return s.decide(ctx, domain, ds, hits)
}

func (s *Server) decide(ctx context.Context, domain string, ds []Descriptor, hits int64) (Result, error) {
	if err := checkRequest(domain, ds); err != nil {
		return Result{}, err
	}
	res, p, err := s.plan(domain, ds, hits)
	if err != nil {
		return Result{}, err
	}
	if len(p.items) == 0 {
		return res, nil
	}
	outs, err := s.decideStore(ctx, &p)
	if err != nil {
		return Result{}, p.fieldOf(err)
	}
	s.settleEach(domain, p.ds, &res, p.which, outs)
	res.Code = QuotaCode(res.Statuses)
	if res.Code == OverLimit && s.shadowAll && !FailedClosed(res.Statuses) {
		res.Code, res.GlobalShadow = OK, true
		s.m.globalShadow.Inc()
	}
	return res, nil
}

// QuotaCode is the overall code of a request's statuses, as upstream's
// shouldRateLimitWorker makes it: OverLimit if a descriptor that is not a
// quota is over its limit, or if the request has quotas and every one of
// them is over; OK otherwise. A request that is over one quota of two
// passes: quotas say what is used up (upstream's dynamic metadata names
// the rules passed), and deny only when nothing is left.
func QuotaCode(statuses []Status) Code {
	quotas, overQuotas := 0, 0
	for _, st := range statuses {
		switch {
		case st.Quota && st.Code == OverLimit:
			quotas++
			overQuotas++
		case st.Quota:
			quotas++
		case st.Code == OverLimit:
			return OverLimit
		}
	}
	if quotas > 0 && quotas == overQuotas {
		return OverLimit
	}
	return OK
}

// FailedClosed reports whether a store failure answered by fail_closed
// denied one of statuses: the HTTP API answers such a request 503, and
// POST /json adds a Retry-After.
func FailedClosed(statuses []Status) bool {
	for _, st := range statuses {
		if st.Err != nil && st.Code == OverLimit {
			return true
		}
	}
	return false
}

// decidePlan asks the Limiter for the outcome of every item of p: all or
// nothing unless Options.IndependentDescriptors. Items of rules in shadow
// mode, and quotas, are decided apart, each on its own, since their
// denials alone must not deny the request.
func (s *Server) decidePlan(ctx context.Context, p *plan) ([]floodgate.Outcome, error) {
	isApart := func(j int) bool { return s.independent || p.shadow[j] || j < len(p.quota) && p.quota[j] }
	if !containsIndex(len(p.items), isApart) {
		// The common case, found without allocating the groups below.
		return s.lim.DecideAll(ctx, p.items)
	}
	var together, apart []int
	for j := range p.items {
		if isApart(j) {
			apart = append(apart, j)
		} else {
			together = append(together, j)
		}
	}
	if len(together) == 0 && !p.several(apart) {
		return s.lim.Decide(ctx, p.items)
	}
	type group struct {
		js     []int
		decide func(context.Context, []floodgate.Item) ([]floodgate.Outcome, error)
	}
	groups := []group{{together, s.lim.DecideAll}}
	// The descriptors decided apart are each decided on its own, but a
	// descriptor's several limits (rate_limits) all or nothing.
	var single []int
	for a := 0; a < len(apart); {
		b := a + 1
		for b < len(apart) && p.which[apart[b]] == p.which[apart[a]] {
			b++
		}
		if b-a == 1 {
			single = append(single, apart[a])
		} else {
			groups = append(groups, group{apart[a:b], s.lim.DecideAll})
		}
		a = b
	}
	groups = append(groups, group{single, s.lim.Decide})
	outs := make([]floodgate.Outcome, len(p.items))
	for _, g := range groups {
		if len(g.js) == 0 {
			continue
		}
		items := make([]floodgate.Item, len(g.js))
		for k, j := range g.js {
			items[k] = p.items[j]
		}
		got, err := g.decide(ctx, items)
		if err != nil {
			if ie, ok := errors.AsType[*floodgate.ItemError](err); ok {
				return nil, &floodgate.ItemError{Index: g.js[ie.Index], Err: ie.Err}
			}
			return nil, err
		}
		for k, j := range g.js {
			outs[j] = got[k]
		}
	}
	return outs, nil
}

// containsIndex reports whether f holds for one of 0..n-1.
func containsIndex(n int, f func(int) bool) bool {
	for j := range n {
		if f(j) {
			return true
		}
	}
	return false
}

// checkRequest checks the shape of a request: what the Limiter does not
// see (the domain, the descriptors and their entries). Costs and limits are
// the Limiter's to check.
func checkRequest(domain string, ds []Descriptor) error {
	switch {
	case domain == "":
		return Invalid("domain", "empty")
	case len(ds) == 0:
		return Invalid("descriptors", "empty")
	case len(ds) > MaxDescriptors:
		return Invalid("descriptors", "%d descriptors, more than the %d allowed", len(ds), MaxDescriptors)
	}
	for i, d := range ds {
		if len(d.Entries) == 0 {
			return Invalid(fmt.Sprintf("descriptors[%d].entries", i), "empty")
		}
		if len(d.Entries) > MaxEntries {
			return Invalid(fmt.Sprintf("descriptors[%d].entries", i), "%d entries, more than the %d allowed", len(d.Entries), MaxEntries)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return Invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "empty")
			}
		}
		if d.Limit != nil && d.Limit.Algorithm == floodgate.Concurrency {
			return Invalid(fmt.Sprintf("descriptors[%d].limit.algorithm", i), "concurrency limits need a lease; they cannot be checked per request")
		}
		if d.Priority != "" {
			if _, err := floodgate.ParsePriority(string(d.Priority)); err != nil {
				return Invalid(fmt.Sprintf("descriptors[%d].priority", i), "%q is not critical, normal or sheddable", string(d.Priority))
			}
		}
	}
	return nil
}

// plan is what Decide asks the Limiter: one item per limited descriptor,
// and which descriptor each is, with where its cost came from.
type plan struct {
	ds      []Descriptor // the descriptors, without their class entries
	items   []floodgate.Item
	which   []int  // the descriptor of each item
	ownHits []bool // whether the item's cost is the descriptor's own hits
	shadow  []bool // whether the item's rule is in shadow mode
	quota   []bool // whether the item is a quota (Status.Quota)
}

// plan matches each descriptor of a checked request to its rule, fills in
// the Status of those the store need not decide, and returns the items of
// the others; a descriptor of a concurrency rule is an error.
func (s *Server) plan(domain string, ds []Descriptor, hits int64) (Result, plan, error) {
	return s.planLease(domain, ds, hits, "")
}

// planLease is plan for a decision (lease empty), or for acquiring lease
// on the concurrency rules the descriptors match (POST /v1/leases), where
// a rule of another algorithm is the error.
func (s *Server) planLease(domain string, ds []Descriptor, hits int64, lease string) (Result, plan, error) {
	// Allocations are most of what the server adds to a decision's CPU
	// (the garbage collector's work grows with them): the entries of a
	// request of a few descriptors stay on the stack, and the flags of
	// the plan share one array.
	cfg := s.cfg.Load()
	// A class carried in the domain's priority_key entry comes off the
	// descriptor before anything else reads its entries (classes.go).
	dom := cfg.Domain(domain)
	ds, carried := takeClasses(dom, ds)
	var entriesBuf [8][]config.Entry
	entries := entriesBuf[:0]
	if len(ds) > len(entriesBuf) {
		entries = make([][]config.Entry, 0, len(ds))
	}
	for _, d := range ds {
		// A descriptor with its own limit matches no rule, as in
		// envoyproxy/ratelimit, where an override is a limit without a
		// name or replaces: it neither replaces nor is replaced.
		var es []config.Entry
		if d.Limit == nil {
			es = d.Entries
		}
		entries = append(entries, es)
	}
	var matchBuf [8]config.Match
	matches := dom.AppendMatchAll(matchBuf[:0], entries)
	res := Result{Code: OK, UnknownDomain: domain != "" && dom == nil}
	if res.UnknownDomain {
		s.warnUnknownDomain(domain)
	}
	n := len(ds)
	var p plan
	if n == 1 {
		// The common request: its status and its plan in one allocation.
		one := new(onePlan)
		res.Statuses = one.status[:]
		p = plan{ds: ds, items: one.item[:0], which: one.which[:0],
			ownHits: one.flags[0:0:1], shadow: one.flags[1:1:2], quota: one.flags[2:2:3]}
	} else {
		res.Statuses = make([]Status, n)
		flags := make([]bool, 3*n)
		p = plan{ds: ds, items: make([]floodgate.Item, 0, n), which: make([]int, 0, n),
			ownHits: flags[0:0:n], shadow: flags[n : n : 2*n], quota: flags[2*n : 2*n : 3*n]}
	}
	var over []floodgate.Limit // an override's limits
	for i, d := range ds {
		st := &res.Statuses[i]
		st.Code = OK
		it := floodgate.Item{Cost: hits, Priority: d.Priority}
		if d.Hits != nil {
			it.Cost = *d.Hits
		}
		if m := matches[i]; d.Limit == nil && m.Rule != nil {
			it.Reserves = m.Rule.Reserves
			if it.Priority == "" {
				// The request names no class: the class its entry
				// carries, held to the rule's ceiling, or its rule's
				// default.
				it.Priority = ruleClass(m.Rule, carriedAt(carried, i))
			}
		} else if it.Priority == "" && d.Limit != nil {
			it.Priority = ownLimitClass(*d.Limit, carriedAt(carried, i))
		}
		switch m := matches[i]; {
		case d.Limit != nil:
			if err := s.checkOwnPeriod(fmt.Sprintf("descriptors[%d].limit.period", i), ownPeriod(*d.Limit)); err != nil {
				return res, p, err
			}
			st.Limit = *d.Limit
			it.Key = "d|" + config.Key(domain, d.Entries)
		case d.Limit == nil && lease == "" && s.overrideFor(cfg, domain, m, d.Entries, st, &it, &over):
			// An override's limits, in place of the rule's (overrides.go).
			// A class their algorithm cannot keep, or the rule's reserves
			// cannot be kept under, is dropped: the request is decided
			// under the whole limit, never refused for the operator's
			// override.
			it.Priority, it.Reserves = overrideClass(it.Priority, it.Reserves, over)
			st.Quota = st.Quota || s.quotaAll
			p.addSeveral(it, i, d.Hits != nil, m.Rule.ShadowMode, st.Quota, over, m.Rule.FailurePolicy)
			continue
		case m.Rule == nil || m.ReplacedBy != nil || m.Rule.Unlimited:
			st.Rule = m.Rule
			st.Quota = s.quotaAll && (m.Rule == nil || !m.Rule.Unlimited)
			s.m.decision(metricDomain(cfg, domain), m.Rule, d.Entries, outcomeUnlimited)
			if m.Rule == nil {
				// The entries' keys only: their values may be a user's.
				s.log.Debug("no rule matched", "domain", metricDomain(cfg, domain), "descriptor", i, "keys", entryKeys(d.Entries))
			}
			continue
		case (m.Rule.Limit.Algorithm == floodgate.Concurrency) != (lease != ""):
			if lease != "" {
				return res, p, Invalid(fmt.Sprintf("descriptors[%d]", i), "rule %s (%s:%d) is not a concurrency limit; decide it with POST /v1/allow", m.Rule.ID, m.Rule.File, m.Rule.Line)
			}
			// A concurrency rule holds units until they are released,
			// which a decision per request cannot express: refused, never
			// accepted and ignored.
			return res, p, Invalid(fmt.Sprintf("descriptors[%d]", i), "rule %s (%s:%d) is a concurrency limit, which holds units until they are released; a decision per request cannot do that (Envoy's protocol has no release): acquire it with POST /v1/leases",
				m.Rule.ID, m.Rule.File, m.Rule.Line)
		default:
			st.Rule, st.Limit = m.Rule, m.Rule.Limit
			st.Quota = m.Rule.QuotaMode
			it.Key = ruleKey(m.Rule, d.Entries)
			if m.Rule.ShareBy != "" {
				// One counter for every value of the level, split among
				// them (share_by; docs/fairness.md).
				key, flow := m.Rule.Flow(d.Entries)
				it.Key, it.Flow = "d|"+key, flow
			}
			it.Policy = m.Rule.FailurePolicy
			if it.Policy == "" && m.Rule.Limit.Durable {
				// A durable quota fails closed unless its rule says
				// otherwise: a use the store did not hold is never billed.
				it.Policy = floodgate.FailClosed
			}
			it.Lease = lease
			if len(m.Rule.Limits) > 1 {
				st.Limited = true
				st.Quota = st.Quota || s.quotaAll
				p.addSeveral(it, i, d.Hits != nil, m.Rule.ShadowMode, st.Quota, m.Rule.Limits, m.Rule.FailurePolicy)
				continue
			}
		}
		st.Limited = true
		st.Quota = st.Quota || s.quotaAll
		it.Limit = st.Limit
		p.items = append(p.items, it)
		p.which = append(p.which, i)
		p.ownHits = append(p.ownHits, d.Hits != nil)
		p.shadow = append(p.shadow, st.Rule != nil && st.Rule.ShadowMode)
		p.quota = append(p.quota, st.Quota)
	}
	if lease != "" {
		// A lease holds every concurrency rule of the request or none:
		// quotas (quota_mode, -quota-mode) are for decisions.
		for i := range res.Statuses {
			res.Statuses[i].Quota = false
		}
		clear(p.quota)
	}
	return res, p, nil
}

// onePlan is the status and the plan of a request of one descriptor.
type onePlan struct {
	status [1]Status
	item   [1]floodgate.Item
	which  [1]int
	flags  [3]bool
}

// ruleKey is the store key of entries under r, "d|" + r.Key(entries), in
// one allocation.
func ruleKey(r *config.Rule, entries []config.Entry) string {
	var buf [128]byte
	return string(r.AppendKey(append(buf[:0], "d|"...), entries))
}

// entryKeys is the keys of entries for a log line, "a.b.c", at most 256
// bytes.
func entryKeys(entries []config.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if b.Len() > 256 {
			return strings.ToValidUTF8(b.String()[:256], "") + "…"
		}
	}
	return b.String()
}

// warnUnknownDomain logs a request of a domain the config does not have:
// at most one line a second for every unknown domain together, so that a
// client sending random domains cannot flood the log. The line names the
// domain of the request that got through (cut at 128 bytes) and, as
// "suppressed", how many were held back.
func (s *Server) warnUnknownDomain(domain string) {
	if len(domain) > 128 {
		domain = strings.ToValidUTF8(domain[:128], "") + "…"
	}
	s.throttle.log(s.log, slog.LevelWarn, "unknown domain", "unknown domain: no rule applies, every descriptor is allowed",
		"domain", domain)
}

// metricDomain is the domain label of a descriptor of domain that matched
// no rule: the domain if the config has it (or "" for an inline limit),
// else unknownDomain.
func metricDomain(cfg *config.Config, domain string) string {
	if domain != "" && cfg.Domain(domain) == nil {
		return unknownDomain
	}
	return domain
}

// fieldOf names the field of the request that an invalid item of the
// Limiter came from: its descriptor's hits (or the request's), or a field
// of the descriptor's limit. A limit of a rule was checked when the config
// was loaded, so only a descriptor's own limit can be at fault.
func (p *plan) fieldOf(err error) error {
	ie, ok := errors.AsType[*floodgate.ItemError](err)
	fe, isField := errors.AsType[*floodgate.FieldError](err)
	if !ok || !isField {
		return err
	}
	i := p.which[ie.Index]
	field := fmt.Sprintf("descriptors[%d].", i)
	switch {
	case fe.Field == "cost" && p.ownHits[ie.Index]:
		field += "hits"
	case fe.Field == "cost":
		field = "hits"
	case fe.Field == "priority":
		field += "priority"
	case errors.Is(fe, floodgate.ErrInvalidLimit):
		field += "limit." + fe.Field
	default:
		field += fe.Field
	}
	return &floodgate.FieldError{Kind: fe.Kind, Field: field, Problem: fe.Problem}
}

// settleEach settles the outcome of each decided descriptor (which[j] is
// the descriptor of outs[j]) into res, which is OverLimit if any is. ds
// gives the entries for metrics; nil when there are none to give.
func (s *Server) settleEach(domain string, ds []Descriptor, res *Result, which []int, outs []floodgate.Outcome) {
	for j := 0; j < len(which); {
		i := which[j]
		k := j + 1
		for k < len(which) && which[k] == i {
			k++ // the items of one descriptor's several limits are adjacent
		}
		var entries []config.Entry
		if ds != nil {
			entries = ds[i].Entries
		}
		st := &res.Statuses[i]
		if k-j == 1 {
			s.settle(domain, entries, st, &outs[j])
		} else {
			s.settleSeveral(domain, entries, st, outs[j:k])
		}
		if st.Code == OverLimit {
			res.Code = OverLimit
		}
		j = k
	}
}

// settle turns the Limiter's outcome for one descriptor into its Status,
// and records it in metrics and logs.
func (s *Server) settle(domain string, entries []config.Entry, st *Status, o *floodgate.Outcome) {
	label := domain // of metrics: a descriptor with its own limit has no rule
	if st.Rule == nil {
		label = metricDomain(s.cfg.Load(), domain)
	}
	shadow := st.Rule != nil && st.Rule.ShadowMode
	st.Limit, st.FailurePolicy = o.Limit, o.Policy
	local := o.Policy == floodgate.FailLocal
	if o.Err != nil && !local && errors.Is(o.Err, ledger.ErrLedger) {
		st.Err = o.Err
		if !shadow {
			st.Code = OverLimit
		}
		s.m.decision(label, st.Rule, entries, outcomeLedgerFailed)
		s.throttle.log(s.log, slog.LevelWarn, "ledger failed|"+ruleID(st.Rule), "ledger failed: durable quota denied", "domain", label, "rule", ruleID(st.Rule), "error", errorCause(o.Err))
		return
	}
	if o.Err != nil && !local {
		st.Err = o.Err
		if st.FailurePolicy == floodgate.FailClosed && !shadow {
			st.Code = OverLimit
			s.m.decision(label, st.Rule, entries, outcomeFailedClosed)
		} else {
			s.m.decision(label, st.Rule, entries, outcomeFailedOpen)
		}
		s.throttle.log(s.log, slog.LevelWarn, "store failed|"+ruleID(st.Rule), "store failed", "domain", label, "rule", ruleID(st.Rule), "failure_mode", string(st.FailurePolicy), "error", errorCause(o.Err))
		return
	}
	if o.Err != nil {
		s.throttle.log(s.log, slog.LevelWarn, "decided locally|"+ruleID(st.Rule), "store failed, decided locally", "domain", label, "rule", ruleID(st.Rule), "failure_mode", string(floodgate.FailLocal), "error", errorCause(o.Err))
	}
	d := o.Decision
	st.Decision = d
	switch {
	case !d.Allowed && d.RetryAfter == 0 && !local:
		// All or nothing: the descriptor had room, but another denied the
		// request, so nothing was taken.
		s.m.decision(label, st.Rule, entries, outcomeOtherDenied)
	case d.Allowed:
		s.m.decision(label, st.Rule, entries, pick(local, outcomeLocalAllowed, outcomeAllowed))
		if !local && d.Limit > 0 && float64(d.Limit-d.Remaining) >= s.near*float64(d.Limit) {
			s.m.nearLimit.WithLabelValues(label, ruleID(st.Rule)).Inc()
		}
	case shadow:
		st.Shadow = true
		s.m.decision(label, st.Rule, entries, outcomeShadowDenied)
		if !local {
			s.throttle.log(s.log, slog.LevelInfo, "shadow|"+ruleID(st.Rule), "shadow mode denial", "domain", label, "rule", ruleID(st.Rule), "limit", st.Limit.String(), "retry_after", d.RetryAfter)
		}
	default:
		st.Code = OverLimit
		s.m.decision(label, st.Rule, entries, pick(local, outcomeLocalDenied, outcomeDenied))
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			// Only then: formatting the limit is a noticeable part of a denial's cost.
			s.log.Debug(pick(local, "denied locally", "denied"), "domain", domain, "rule", ruleID(st.Rule), "limit", st.Limit.String(),
				"remaining", d.Remaining, "retry_after", d.RetryAfter, "reset_after", d.ResetAfter)
		}
	}
}

// pick is a if cond, else b.
func pick(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

// DecideInline decides one key against a limit given by the caller (the HTTP
// API's inline form), answered by the default failure mode. Keys of inline
// limits never meet keys of config rules. A period above
// Options.MaxOwnPeriod is invalid (field "limit.period").
func (s *Server) DecideInline(ctx context.Context, key string, limit floodgate.Limit, cost int64) (Status, error) {
	return s.DecideInlinePriority(ctx, key, limit, cost, "")
}

// DecideInlinePriority is DecideInline for a request of class p
// (floodgate.Item.Priority; empty for none): the request is decided
// under the limit with its capacity lowered by p's reserve, on the key's
// one state. A class the limit cannot honour is invalid (field
// "priority").
func (s *Server) DecideInlinePriority(ctx context.Context, key string, limit floodgate.Limit, cost int64, p floodgate.Priority) (Status, error) {
	if s.tr != nil {
		return s.decideInlineTraced(ctx, key, limit, cost, p)
	}
	return s.decideInline(ctx, key, limit, cost, p)
}

func (s *Server) decideInline(ctx context.Context, key string, limit floodgate.Limit, cost int64, p floodgate.Priority) (Status, error) {
	if err := s.checkOwnPeriod("limit.period", ownPeriod(limit)); err != nil {
		return Status{}, err
	}
	if err := checkInlineKey(key); err != nil {
		return Status{}, err
	}
	if limit.Algorithm == floodgate.Concurrency {
		return Status{}, Invalid("limit.algorithm", "concurrency limits need a lease; they cannot be checked per request")
	}
	outs, err := s.decideItems(ctx, []floodgate.Item{{Key: inlineKey(key), Limit: limit, Cost: cost, Priority: p}})
	if err != nil {
		return Status{}, inlineField(err)
	}
	st := Status{Code: OK, Limited: true}
	s.settle("", nil, &st, &outs[0])
	return st, nil
}

// ResetInline forgets the state of an inline key under limit.
func (s *Server) ResetInline(ctx context.Context, key string, limit floodgate.Limit) error {
	if err := checkInlineKey(key); err != nil {
		return err
	}
	if err := s.lim.Reset(ctx, inlineKey(key), limit); err != nil {
		return inlineField(err)
	}
	return nil
}

// inlineKey is the store key of an inline key: "i|" keeps it apart from
// the keys of config rules ("d|"), and an empty key stays empty, so that
// the Limiter says so.
func inlineKey(key string) string {
	if key == "" {
		return ""
	}
	return "i|" + key
}

// checkInlineKey checks the length of an inline key as the caller gave
// it: the Limiter sees it with the "i|" the server adds.
func checkInlineKey(key string) error {
	if most := floodgate.MaxKeyLen - len("i|"); len(key) > most {
		return Invalid("key", "%d bytes, more than the %d allowed", len(key), most)
	}
	return nil
}

// inlineField names the field of the inline form that an invalid request
// of the Limiter came from: a field of the limit is under "limit".
func inlineField(err error) error {
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	switch {
	case ok && fe.Field == "priority":
		return fe
	case !ok || !errors.Is(fe, floodgate.ErrInvalidLimit):
		return err
	}
	return &floodgate.FieldError{Kind: fe.Kind, Field: "limit." + fe.Field, Problem: fe.Problem}
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
	if p, ok := s.lim.Store().(floodgate.Pinger); ok {
		ctx, cancel := context.WithTimeout(ctx, max(s.timeout, 250*time.Millisecond))
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			if s.failMode == floodgate.FailLocal {
				return fmt.Sprintf("ok: failure mode local decides in memory, store unreachable: %v", err), nil
			}
			return "", fmt.Errorf("store unreachable: %w", err)
		}
	}
	if p, ok := s.ledger.(floodgate.Pinger); ok {
		ctx, cancel := context.WithTimeout(ctx, max(s.timeout, 250*time.Millisecond))
		defer cancel()
		if err := p.Ping(ctx); err != nil {
			if s.ledgerPolicy == floodgate.FailOpen {
				return fmt.Sprintf("ok: ledger unreachable, durable quotas decided on their counters (ledger policy fail_open): %v", err), nil
			}
			return "", fmt.Errorf("ledger unreachable (durable quotas deny new windows and commits fail): %w", err)
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

// errorCause is err without the context its wrappers put in front of it,
// as a store failure's warning logs it: stores wrap their failures with
// the key (the Redis store: "redisstore: fixed_window <key>: …"), and a
// key holds the descriptor's values (user IDs, addresses), which warnings
// leave out; -log-level debug names the keys of each request. It follows
// the chain while an error's message is a prefix followed by the next
// one's, and stops at an error that adds to its cause (ErrNotReplicated's
// "0 of 1 acknowledged") or at a network error (which names the Redis
// address, not a caller's). Joined errors give the cause of each.
func errorCause(err error) error {
	for {
		if _, ok := err.(*net.OpError); ok {
			return err
		}
		if m, ok := err.(interface{ Unwrap() []error }); ok {
			var causes []error
			for _, e := range m.Unwrap() {
				causes = append(causes, errorCause(e))
			}
			return errors.Join(causes...)
		}
		next := errors.Unwrap(err)
		if next == nil || !strings.HasSuffix(err.Error(), next.Error()) {
			return err
		}
		err = next
	}
}
