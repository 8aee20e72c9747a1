// Package httplimit rate limits net/http handlers with a floodgate.Limiter.
// It works with any router built on http.Handler.
//
// The five-line setup, 10 requests per second per client address on the
// memory store:
//
//	limiter, _ := floodgate.New(memstore.New(nil), nil)
//	mw, err := httplimit.New(httplimit.Config{
//		Limiter: limiter,
//		Limits:  []floodgate.Limit{{Limit: 10, Period: time.Second}},
//	})
//	http.ListenAndServe(":8080", mw.Handler(mux))
//
// # What a request goes through
//
// A request that Skip selects passes untouched. Otherwise the Key function
// names the subject being limited: by default the peer address of the
// connection (ClientIP with no trusted proxies); behind a reverse proxy,
// ClientIP with TrustedProxies; an API key with Header (stored hashed); or
// any function of the request, such as the authenticated user. A request
// without a key is answered as MissingKey says: denied with 400 by default,
// allowed unlimited, or counted under one shared key; never pooled by
// accident.
//
// Every limit of Config.Limits is then checked for the key, all or nothing
// (Limiter.AllowEach, atomic on a store with floodgate.Batcher such as
// memstore and redisstore): "10 per second and 1000 per hour" never lets a
// denial by one use up the other.
//
// Every limited response carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11, written by package
// ratelimitheader), and, on request, the legacy X-RateLimit-* trio. A
// denied request gets 429 Too Many Requests with Retry-After in
// delay-seconds, Cache-Control: no-store, and an RFC 9457 problem body of
// type https://iana.org/assignments/http-problem-types#quota-exceeded
// listing the violated policies; Config.Deny replaces that answer.
//
// # Failures
//
// When the store fails, the Limiter's failure policy decides: with
// floodgate.FailOpen the request passes (with RateLimit-Policy only, since
// the state is unknown); with floodgate.FailClosed, the default, it is
// answered 503 Service Unavailable, not 429: the client did nothing wrong.
// With floodgate.FailLocal the Limiter's local store decides with this
// instance's share of each limit, and the answer is an ordinary one (429
// on a denial), since the decision is real: RateLimit-Policy still names
// the configured policy, the fleet's, while RateLimit gives what is left of
// this instance's share.
// A key the Limiter refuses (longer than floodgate.MaxKeyLen) is 400.
//
// # Waiting and priority classes
//
// With MaxWait, a request that finds no unit free waits for the earliest
// slot within MaxWait instead of being refused (floodgate.Limiter.Schedule,
// docs/waiting.md): the slot is taken in the store's one atomic step, so
// requests on every instance sharing the store are served in order and
// the rate holds; the middleware sleeps until the slot, then passes the
// request on. If the request's context ends first (the client went away,
// a deadline), the slot is given back, exactly once, and the request is
// answered through Deny with Result.Err the context's error. Only one
// limit, a GCRA or a token bucket, can wait.
//
// With Priority, each request is decided under its class's share of the
// limits (floodgate.ClassLimit): near the limit, sheddable requests are
// refused first, so the last part of the budget is kept for critical ones
// (a health check, a paying customer). Every limit must then be a GCRA or
// a fixed window without CountRejected.
//
// # Trying a limit out
//
// With DryRun the middleware decides, writes the fields and reports as
// usual, but never denies: a denial is reported (Report, and the
// Limiter's Observer) and the request passes, without Retry-After.
package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
)

// ProblemQuotaExceeded is the problem type of a 429 answer, defined by
// draft-ietf-httpapi-ratelimit-headers-11, section 5.1.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ErrMissingKey is the Result.Err of a request for which the Key function
// found no key.
var ErrMissingKey = errors.New("httplimit: request has no key")

// KeyFunc names the subject a request is limited as ("ip:192.0.2.1",
// "user:42"). It returns "" when the request carries no key; Config.MissingKey
// says what happens then. Keys of different kinds must not collide: the
// key functions of this package prefix theirs ("ip:", "header:").
type KeyFunc func(*http.Request) string

// MissingKey says what to do with a request whose KeyFunc returns "".
type MissingKey int

const (
	// DenyMissingKey answers the request 400 Bad Request (through Deny,
	// with Result.Err ErrMissingKey). It is the default.
	DenyMissingKey MissingKey = iota
	// AllowMissingKey lets the request through without limiting it. Use
	// it only where another layer limits keyless requests.
	AllowMissingKey
	// SharedMissingKey counts every keyless request under one key,
	// Config.AnonymousKey: all anonymous clients share one budget.
	SharedMissingKey
)

// DenyFunc answers a request that is not let through: a denial (Result.Err
// nil), a missing or refused key, or a store failure under
// floodgate.FailClosed. The RateLimit fields and Retry-After are already in
// w.Header() when it is called. WriteDenied is the default.
type DenyFunc func(w http.ResponseWriter, r *http.Request, res Result)

// Config configures a Middleware. Limiter and Limits are required; every
// other field has a working zero value.
type Config struct {
	// Limiter decides; its Options set the store, the failure policy and
	// the timeout.
	Limiter *floodgate.Limiter
	// Limits are checked together for every request, all or nothing; each
	// request costs 1 unit of each. At least one; not Concurrency (a lease
	// must outlive the decision: see examples/concurrency). Names, if set,
	// must be unique; they name the policies in the fields and the
	// problem body (see ratelimitheader.PolicyName).
	Limits []floodgate.Limit
	// Key names the subject; nil means ClientIP{}.Key, the peer address of
	// the connection, believing no forwarding header.
	Key KeyFunc
	// KeyPrefix is prepended to every key, so that two middlewares with the
	// same limits on one Limiter (two routes) count apart. Empty shares.
	KeyPrefix string
	// MissingKey says what a request without a key gets; default
	// DenyMissingKey.
	MissingKey MissingKey
	// AnonymousKey is the key of SharedMissingKey; default "anonymous".
	AnonymousKey string
	// Skip, if set, lets the requests it selects through untouched and
	// uncounted (health checks, metrics).
	Skip func(*http.Request) bool
	// DryRun decides and reports but never denies.
	DryRun bool
	// Headers chooses the fields written; nil writes RateLimit-Policy,
	// RateLimit and Retry-After.
	Headers *ratelimitheader.Options
	// Deny answers requests that are not let through; nil means
	// WriteDenied.
	Deny DenyFunc
	// Report, if set, is called with the Result of every request that was
	// not skipped, before it is passed on or denied. It must be fast and
	// safe for concurrent use.
	Report func(*http.Request, Result)
	// MaxWait, above zero, has a request that finds no unit free wait for
	// the earliest slot within MaxWait, at most floodgate.MaxWait, instead
	// of being refused (see the package doc); it is refused only when no
	// slot is free within it. Limits must then be one GCRA limit. Each
	// request is then a reservation settled when its slot comes: two
	// calls of the store where a decision is one.
	MaxWait time.Duration
	// Priority, if set, gives each request its class: near the limit,
	// lower classes are refused first (floodgate.AllowPriority). ""
	// decides under the whole limits, as without Priority. Every limit
	// must be a GCRA or a fixed window without CountRejected; not with
	// MaxWait (a wait holds the whole limit).
	Priority func(*http.Request) floodgate.Priority
}

// Result is what the middleware decided for a request. The next handler
// finds it with FromContext.
type Result struct {
	// Key is the key sent to the Limiter (with KeyPrefix), "" when the
	// request had none and was not counted under AnonymousKey.
	Key string
	// Limits are the limits checked, Config.Limits.
	Limits []floodgate.Limit
	// Decision is the combined decision (floodgate.Combine), or the failure
	// policy's when Err is set.
	Decision floodgate.Decision
	// Decisions are the decisions of each limit, in the order of Limits;
	// nil when the state is unknown (Err set, or no key).
	Decisions []floodgate.Decision
	// Err is ErrMissingKey, the Limiter's error (a store failure, or an
	// error wrapping floodgate.ErrInvalidRequest for a refused key), or nil.
	Err error
	// DryRun reports that the request passed only because of
	// Config.DryRun.
	DryRun bool
	// Priority is the request's class (Config.Priority); Limits and
	// Decisions are then the class's share of Config.Limits.
	Priority floodgate.Priority
	// Waited is how long the request waited for its slot (Config.MaxWait)
	// before it was passed on.
	Waited time.Duration
}

// Violated names the policies that denied the request (by
// ratelimitheader.PolicyName): those whose own decision is a denial with a
// wait, not those that merely had to give back their unit because
// another limit denied.
func (res Result) Violated() []string {
	return limitcheck.Violated(res.Limits, res.Decisions)
}

// Middleware limits the handlers it wraps. It is safe for concurrent use.
type Middleware struct {
	c   Config
	chk limitcheck.Checker
}

// New checks c and returns a Middleware.
func New(c Config) (*Middleware, error) {
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
	if err := chk.Init("httplimit", "request"); err != nil {
		return nil, err
	}
	if c.Key == nil {
		c.Key = ClientIP{}.Key
	}
	if c.Deny == nil {
		c.Deny = WriteDenied
	}
	return &Middleware{c: c, chk: chk}, nil
}

// Handler wraps next: requests the limits admit (or that are skipped, or
// pass in DryRun) reach next; others are answered by Config.Deny. Its
// signature fits routers' Use methods.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.c.Skip != nil && m.c.Skip(r) {
			next.ServeHTTP(w, r)
			return
		}
		res := m.Check(r)
		h := w.Header()
		switch {
		case res.Decisions != nil:
			ratelimitheader.SetEach(h, res.Limits, res.Decisions, m.c.Headers)
		case res.Key != "" && res.Err != nil && !errors.Is(res.Err, floodgate.ErrInvalidRequest):
			// A store failure: the policy is known, the state is not.
			ratelimitheader.SetEach(h, res.Limits, nil, m.c.Headers)
		}
		if !res.Decision.Allowed && m.c.DryRun {
			res.DryRun = true
			h.Del(ratelimitheader.HeaderRetryAfter)
		}
		if m.c.Report != nil {
			m.c.Report(r, res)
		}
		if res.Decision.Allowed || res.DryRun {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), resultKey{}, res)))
			return
		}
		m.c.Deny(w, r, res)
	})
}

// Check decides r without answering it: the key, then every limit (and
// with MaxWait, waits for the slot). It takes from the limits like
// Handler does; most callers want Handler.
func (m *Middleware) Check(r *http.Request) Result {
	var class floodgate.Priority
	if m.c.Priority != nil {
		class = m.c.Priority(r)
	}
	o := m.chk.Check(r.Context(), m.c.Key(r), class)
	res := Result{Key: o.Key, Limits: m.chk.Limits, Decision: o.Decision, Decisions: o.Decisions, Err: o.Err, Priority: class, Waited: o.Waited}
	if o.Limits != nil {
		res.Limits = o.Limits
	}
	return res
}

type resultKey struct{}

// FromContext returns the Result of the middleware that let the request
// through, from the request's context.
func FromContext(ctx context.Context) (Result, bool) {
	res, ok := ctx.Value(resultKey{}).(Result)
	return res, ok
}

// Problem is an RFC 9457 problem details object, as WriteDenied writes it.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the policies that denied the request
	// (draft-ietf-httpapi-ratelimit-headers-11, section 5.1).
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// ProblemFor is the problem WriteDenied answers res with: 429 and
// ProblemQuotaExceeded for a denial; 400 for a missing or refused key; 503
// for a store failure under floodgate.FailClosed. Its detail never carries
// the key or the store's error text.
func ProblemFor(res Result) Problem {
	const (
		bad         = http.StatusBadRequest
		unavailable = http.StatusServiceUnavailable
	)
	switch {
	case errors.Is(res.Err, ErrMissingKey):
		return Problem{Type: "about:blank", Title: http.StatusText(bad), Status: bad, Detail: "The request carries no rate limit key."}
	case isClassError(res.Err):
		return Problem{Type: "about:blank", Title: http.StatusText(bad), Status: bad, Detail: "The request's priority class is not valid."}
	case errors.Is(res.Err, floodgate.ErrInvalidRequest):
		return Problem{Type: "about:blank", Title: http.StatusText(bad), Status: bad, Detail: "The request's rate limit key is not valid."}
	case errors.Is(res.Err, context.Canceled), errors.Is(res.Err, context.DeadlineExceeded):
		return Problem{Type: "about:blank", Title: http.StatusText(unavailable), Status: unavailable, Detail: "The request ended before its turn came."}
	case res.Err != nil:
		return Problem{Type: "about:blank", Title: http.StatusText(unavailable), Status: unavailable, Detail: "The rate limiter is unavailable; try again later."}
	}
	p := Problem{Type: ProblemQuotaExceeded, Title: "Quota Exceeded", Status: http.StatusTooManyRequests, ViolatedPolicies: res.Violated()}
	switch ra := res.Decision.RetryAfter; {
	case ra == floodgate.Never:
		p.Detail = "The request exceeds the quota and can never be admitted."
	case ra > 0 && ra <= time.Second:
		p.Detail = "Retry after 1 second."
	case ra > 0:
		p.Detail = "Retry after " + ratelimitheader.RetryAfter(ra) + " seconds."
	}
	return p
}

// isClassError reports an error of the class Config.Priority gave.
func isClassError(err error) bool {
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	return ok && fe.Field == "priority"
}

// WriteDenied is the default DenyFunc: it writes ProblemFor(res) as
// application/problem+json with Cache-Control: no-store.
func WriteDenied(w http.ResponseWriter, r *http.Request, res Result) {
	p := ProblemFor(res)
	body, _ := json.Marshal(p) // a Problem always marshals
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	if r.Method != http.MethodHead {
		w.Write(append(body, '\n'))
	}
}
