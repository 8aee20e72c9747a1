// Package httpapi serves the HTTP JSON API of `floodgate serve` over a
// server.Server: decisions (POST /v1/allow), reservations, leases, the
// state of a key (reset, inspect), the config in force, /metrics,
// /healthz, /readyz and the OpenAPI document. It only translates: JSON
// bodies become the engine's requests (server.Descriptor, inline
// limits), and its Statuses become JSON with the RateLimit header
// fields. Its problem details (RFC 9457) and header fields are exported
// for the other HTTP endpoints (server/envoyrls's POST /json, the
// dashboard of server/ui).
package httpapi

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxBodyBytes is the largest HTTP request body.
const MaxBodyBytes = 1 << 20

// Options configure an API. A nil *Options, or the zero value, serves
// every route to every caller.
type Options struct {
	// Auth, when set, holds the routes to the bearer tokens of their
	// scope (see transport.Auth): decisions, reservations and leases to
	// client tokens, resets, inspections and the config to admin
	// tokens; nil serves every route to every caller.
	Auth *transport.Auth
	// GuardBrowsers, when Auth is nil, keeps browsers from using the API
	// on another site's behalf (see Handler); floodgate serve sets it.
	// Ignored with Auth.
	GuardBrowsers bool
	// AllowedHosts are the host names (without port; case does not
	// matter) a request's Host may name under GuardBrowsers, besides an
	// IP address and localhost.
	AllowedHosts []string
	// IDKeys sign the ids of reservations and leases (see LoadIDKeys):
	// each at least MinIDKeyLen bytes, the first signs, every one
	// verifies. Several instances that settle each other's ids need the
	// same keys. None: a random key of this process, whose ids settle
	// only here and only until it restarts.
	IDKeys [][]byte
	// Overrides, if set, serves the admin routes of overrides
	// (/v1/overrides: set, list, remove, audit; overrides.go); without
	// it they answer 501 (no ledger).
	Overrides *server.OverrideSync
	// MaxHold is the longest the service holds a response until its slot
	// comes (max_wait_ms on POST /v1/allow, hold on POST
	// /v1/reservations): a longer max_wait_ms is bounded by it, so no
	// slot later than MaxHold is taken. 0 means DefaultMaxHold; at most
	// floodgate.MaxWait.
	MaxHold time.Duration
	// MaxHeld is how many requests the service holds at once; one more
	// is refused 503 with Retry-After before it takes a slot, so that
	// holding cannot exhaust the server. 0 means DefaultMaxHeld;
	// negative holds none (every request to be held is refused).
	MaxHeld int
}

// API is the HTTP JSON API over a server.Server. It is safe for
// concurrent use; most callers want New and Handler.
type API struct {
	srv  *server.Server
	auth *transport.Auth
	// guard is Options.GuardBrowsers without Auth; hosts are
	// Options.AllowedHosts, lower case.
	guard bool
	hosts map[string]bool
	// ids signs the ids of reservations and leases.
	ids *signer
	// reservations counts the steps of reservations, by step and result.
	reservations *prometheus.CounterVec
	// overrides is Options.Overrides.
	overrides *server.OverrideSync
	// holds bounds the requests held until their slot (wait.go).
	holds *holds
}

// New returns the API of srv, its metrics in srv's registry. opts may
// be nil. The API of one server can be made more than once (they share
// the metrics).
func New(srv *server.Server, opts *Options) (*API, error) {
	s := &API{srv: srv, hosts: map[string]bool{}}
	var keys [][]byte
	if opts != nil {
		s.auth, keys, s.overrides = opts.Auth, opts.IDKeys, opts.Overrides
		s.guard = opts.GuardBrowsers && opts.Auth == nil
		for _, h := range opts.AllowedHosts {
			s.hosts[strings.TrimSuffix(strings.ToLower(h), ".")] = true
		}
	}
	var err error
	if s.ids, err = newSigner(keys); err != nil {
		return nil, err
	}
	if s.reservations, err = register(srv.Registry(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_reservations_total",
		Help: "Steps of the HTTP API's reservations, by step (reserve, commit, cancel) and result: reserve held, denied or failed; commit and cancel settled, replayed (a retry answered as first), expired, or failed (unknown, conflicting, or the store or ledger failed).",
	}, []string{"step", "result"})); err != nil {
		return nil, err
	}
	if s.holds, err = newHolds(opts, srv.Registry()); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler returns the HTTP API:
//
//	POST /v1/allow      decide an inline limit or a domain's descriptors
//	POST /v1/reset      forget a key's state (inline, or a descriptor's)
//	POST /v1/inspect    a key's state, taking nothing
//	POST /v1/reservations              hold a request's upper bound
//	POST /v1/reservations/{id}/commit  settle its actual cost
//	POST /v1/reservations/{id}/cancel  give the hold back
//	POST /v1/leases                    acquire units of concurrency limits
//	POST /v1/leases/{id}/renew         hold them for another period
//	POST /v1/leases/{id}/release       give them back
//	GET  /v1/config     the rules in force
//	GET  /metrics       Prometheus metrics
//	GET  /healthz       the process is alive
//	GET  /readyz        config loaded and store reachable (or failure mode local)
//	GET  /openapi.yaml  the OpenAPI 3.0.3 document of these routes and POST /json
//
// extra handlers (such as envoyrls's POST /json) are added by pattern.
//
// The OpenAPI document (openapi.yaml in this package, built into the
// binary) is the contract for clients in other languages: generate one from
// GET /openapi.yaml. A test drives this handler through every route and
// status the document lists and validates each exchange against it, so a
// route or a status added on one side only fails the test.
//
// With Options.GuardBrowsers and without Auth (no token files: every
// route open, floodgate serve's loopback default), a browser is kept
// from using the API on another site's behalf: a POST
// must say Content-Type: application/json (else 415), which no form and
// no cross-site fetch without a CORS preflight can send, and the Host
// must be an IP address, localhost (or a name under .localhost) or one
// of Options.AllowedHosts (else 421), which no DNS rebinding can send: a
// page of evil.example whose name is made to point at 127.0.0.1 still
// says Host: evil.example.
func (s *API) Handler(extra map[string]http.Handler) http.Handler {
	mux := http.NewServeMux()
	tr := s.srv.Tracer()
	var allow http.Handler
	for _, r := range s.routes(extra) {
		h := guard(s.auth, r.scope, r.h)
		if tr != nil && strings.HasPrefix(r.pattern, "POST ") {
			// A span per call of what decides, reserves, settles or
			// resets; reads (metrics, probes, the dashboard's feed) have
			// none.
			h = tr.HTTP(r.pattern, h)
		}
		mux.Handle(r.pattern, h)
		if r.pattern == allowPattern {
			allow = h
		}
	}
	for pattern := range extra {
		if _, path, _ := strings.Cut(pattern, " "); !strings.HasPrefix(path, "/") && !strings.HasPrefix(pattern, "/") {
			// A pattern of a host could be more specific than
			// POST /v1/allow: leave every request to the mux.
			allow = nil
		}
	}
	// POST /v1/allow, nearly every request, goes to its handler without
	// the mux's search of every pattern (2.6% of serve's CPU under
	// benchall's load), as the mux would send it: the path exactly
	// /v1/allow, not escaped otherwise, and r.Pattern set as the mux
	// sets it. Any other path, method or spelling is the mux's.
	route := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/allow" && r.URL.RawPath == "" && allow != nil {
			r.Pattern = allowPattern
			allow.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}
	if !s.guard {
		return http.HandlerFunc(route)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeProblem(w, &httpError{status: http.StatusMisdirectedRequest, field: "Host",
				msg: fmt.Sprintf("%q is not a name of this server; without token files it answers only to an IP address, localhost and -allowed-hosts", r.Host)})
			return
		}
		if r.Method == http.MethodPost && !isJSON(r.Header.Get("Content-Type")) {
			writeProblem(w, &httpError{status: http.StatusUnsupportedMediaType, field: "Content-Type",
				msg: fmt.Sprintf("%q: a POST must be application/json (curl: -H 'Content-Type: application/json', or --json)", r.Header.Get("Content-Type"))})
			return
		}
		route(w, r)
	})
}

// allowPattern is the route of decisions.
const allowPattern = "POST /v1/allow"

// hostAllowed reports whether a Host header names this server for a
// client without a token: empty (HTTP/1.0, never a browser), an IP
// address, localhost or a name under .localhost (RFC 6761: a browser
// resolves them to loopback itself), or an allowed host; the port is not
// looked at.
func (s *API) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	if _, err := netip.ParseAddrPort(host); err == nil {
		// An address and a port, what a client of an IP address sends:
		// the path below in one step.
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")), ".")
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	return name == "localhost" || strings.HasSuffix(name, ".localhost") || s.hosts[name]
}

// isJSON reports whether a Content-Type is application/json, with or
// without parameters (charset=utf-8).
func isJSON(ct string) bool {
	if ct == "application/json" {
		// What almost every client sends; ParseMediaType allocates.
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// guard wraps h so that it serves only callers of scope (auth nil: every
// caller): 401 (with WWW-Authenticate: Bearer) without a known token,
// 403 with a client token on an admin route, as an RFC 9457 problem.
func guard(auth *transport.Auth, scope transport.Scope, h http.Handler) http.Handler {
	if auth == nil || scope == transport.ScopeOpen {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		unauth, err := auth.Allowed(r.Header.Get("Authorization"), scope)
		if err == nil {
			h.ServeHTTP(w, r)
			return
		}
		code := http.StatusForbidden
		if unauth {
			code = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
		}
		writeProblem(w, &httpError{status: code, field: "Authorization", msg: err.Error()})
	})
}

// route is one pattern of Handler's mux and what serves it.
type route struct {
	pattern string
	h       http.Handler
	scope   transport.Scope // what the API's Auth asks of its callers
}

// routes lists what Handler serves, in one place, so that the OpenAPI test
// can check that the document names every route (see export_test.go).
func (s *API) routes(extra map[string]http.Handler) []route {
	rs := []route{
		{allowPattern, http.HandlerFunc(s.handleAllow), transport.ScopeClient},
		{"POST /v1/reset", http.HandlerFunc(s.handleReset), transport.ScopeAdmin},
		{"POST /v1/inspect", http.HandlerFunc(s.handleInspect), transport.ScopeAdmin},
		{"POST /v1/reservations", http.HandlerFunc(s.handleReserve), transport.ScopeClient},
		{"POST /v1/reservations/{id}/commit", s.handleSettle(false), transport.ScopeClient},
		{"POST /v1/reservations/{id}/cancel", s.handleSettle(true), transport.ScopeClient},
		{"POST /v1/leases", http.HandlerFunc(s.handleAcquire), transport.ScopeClient},
		{"POST /v1/leases/{id}/renew", s.handleLease(false), transport.ScopeClient},
		{"POST /v1/leases/{id}/release", s.handleLease(true), transport.ScopeClient},
		{"GET /v1/config", http.HandlerFunc(s.handleConfig), transport.ScopeAdmin},
		{"GET /metrics", promhttp.HandlerFor(s.srv.Registry(), promhttp.HandlerOpts{Registry: s.srv.Registry()}), transport.ScopeOpen},
		{"GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, "ok\n")
		}), transport.ScopeOpen},
		{"GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			status, err := s.srv.Status(r.Context())
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				if !s.auth.IsAdmin(r) {
					// The store's error names its address.
					io.WriteString(w, "not ready (details with an admin token)\n")
					return
				}
				fmt.Fprintf(w, "not ready: %v\n", err)
				return
			}
			if !s.auth.IsAdmin(r) {
				status, _, _ = strings.Cut(status, ":")
			}
			io.WriteString(w, status+"\n")
		}), transport.ScopeOpen},
		{"GET /openapi.yaml", http.HandlerFunc(serveOpenAPI), transport.ScopeOpen},
	}
	rs = append(rs, s.overrideRoutes()...)
	for _, pattern := range slices.Sorted(maps.Keys(extra)) {
		scope := transport.ScopeClient
		if sh, ok := extra[pattern].(Scoped); ok {
			scope = sh.Scope()
		}
		rs = append(rs, route{pattern, extra[pattern], scope})
	}
	return rs
}

// Scoped is a handler of Handler's extras that says what it asks of its
// callers (the dashboard's page, which holds no data, is ScopeOpen);
// extras that are not Scoped need ScopeClient.
type Scoped interface {
	http.Handler
	Scope() transport.Scope
}

// openAPI is the OpenAPI document of the HTTP API.
//
//go:embed openapi.yaml
var openAPI []byte

// serveOpenAPI answers GET /openapi.yaml. The type is application/yaml
// (RFC 9512), which says how to read the bytes and which every YAML reader
// and HTTP library knows. The OpenAPI Initiative's own
// application/vnd.oai.openapi would also say what the document is, but it
// has no +yaml suffix, so generic tools cannot tell it is YAML; and
// application/openapi+yaml, which would say both, is still an Internet-Draft.
// Client generators read the document by its content, not its type.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/yaml")
	h.Set("Content-Length", strconv.Itoa(len(openAPI)))
	w.Write(openAPI)
}

// LimitJSON is a floodgate.Limit in the HTTP API:
// {"algorithm": "gcra", "limit": 10, "period": "1s", "burst": 20}, or a
// calendar window (floodgate.Calendar) in place of a period:
// {"limit": 10000, "unit": "month", "time_zone": "America/New_York",
// "anchor": "15"}.
type LimitJSON struct {
	Algorithm     string `json:"algorithm,omitempty"`
	Limit         *int64 `json:"limit"`
	Period        string `json:"period,omitempty"`
	Unit          string `json:"unit,omitempty"`
	TimeZone      string `json:"time_zone,omitempty"`
	Anchor        string `json:"anchor,omitempty"`
	Burst         int64  `json:"burst,omitempty"`
	Window        string `json:"window,omitempty"`
	CountRejected bool   `json:"count_rejected,omitempty"`
	Name          string `json:"name,omitempty"`
}

// toLimit converts the JSON form, naming the field of any problem under
// prefix ("limit").
func (l *LimitJSON) toLimit(prefix string) (floodgate.Limit, error) {
	if l.Limit == nil {
		return floodgate.Limit{}, invalid(prefix+".limit", "required")
	}
	var cal floodgate.Calendar
	var period time.Duration
	switch {
	case l.Unit != "" || l.TimeZone != "" || l.Anchor != "":
		if l.Period != "" {
			return floodgate.Limit{}, invalid(prefix+".period", "give a period or a calendar unit, not both")
		}
		if l.Unit == "" {
			return floodgate.Limit{}, invalid(prefix+".unit", "required with time_zone or anchor (day, week, month or year)")
		}
		c, err := floodgate.ParseCalendar(l.Unit, l.TimeZone, l.Anchor)
		if err != nil {
			field, msg := prefix, err.Error()
			if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
				field, msg = prefix+"."+fe.Field, fe.Problem
			}
			return floodgate.Limit{}, invalid(field, "%s", msg)
		}
		cal = c
	case l.Period == "":
		return floodgate.Limit{}, invalid(prefix+".period", "required (a duration such as \"1m\" or \"90s\"), or a calendar unit")
	default:
		var err error
		if period, err = time.ParseDuration(l.Period); err != nil {
			return floodgate.Limit{}, invalid(prefix+".period", "%q is not a duration such as \"1m\" or \"90s\"", l.Period)
		}
	}
	lim := floodgate.Limit{
		Algorithm: floodgate.Algorithm(l.Algorithm), Limit: *l.Limit, Period: period, Burst: l.Burst,
		Window: floodgate.Window(l.Window), CountRejected: l.CountRejected, Name: l.Name, Calendar: cal,
	}
	if err := lim.Validate(); err != nil {
		// Name the first field Validate complains about; the JSON names
		// are floodgate.FieldError's.
		field := prefix
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			field = prefix + "." + fe.Field
		}
		return floodgate.Limit{}, invalid(field, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if err := ratelimitheader.CheckName(lim.Name); err != nil {
		return floodgate.Limit{}, invalid(prefix+".name", "%v", err)
	}
	return lim, nil
}

func limitJSON(l floodgate.Limit) *LimitJSON {
	// The limit and its count in one allocation: every answer has one.
	jn := &struct {
		j LimitJSON
		n int64
	}{j: limitValue(l), n: l.Limit}
	jn.j.Limit = &jn.n
	return &jn.j
}

// limitValue is *limitJSON(l) without its Limit, which the caller points
// at a copy of l.Limit.
func limitValue(l floodgate.Limit) LimitJSON {
	j := LimitJSON{Algorithm: string(l.EffectiveAlgorithm()), Period: periodString(l.Period), Burst: l.Burst,
		Window: string(l.Window), CountRejected: l.CountRejected, Name: l.Name}
	if l.IsCalendar() {
		j.Period, j.Unit, j.TimeZone, j.Anchor = "", string(l.Calendar.Unit), l.Calendar.Location.String(), l.Calendar.Anchor()
		if l.Calendar.Location == nil {
			j.TimeZone = "UTC"
		}
	}
	return j
}

// periodString is d.String(), without its allocation for the periods
// of the config's units (every answer of a config rule has one).
func periodString(d time.Duration) string {
	switch d {
	case time.Second:
		return "1s"
	case time.Minute:
		return "1m0s"
	case time.Hour:
		return "1h0m0s"
	case 24 * time.Hour:
		return "24h0m0s"
	}
	return d.String()
}

// EntryJSON is one key/value pair of a descriptor.
type EntryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DescriptorJSON is one descriptor of a request.
type DescriptorJSON struct {
	Entries []EntryJSON `json:"entries"`
	Hits    *int64      `json:"hits,omitempty"`
	Limit   *LimitJSON  `json:"limit,omitempty"`
}

// AllowRequest is the body of POST /v1/allow: either key and limit (inline),
// or domain and descriptors (config rules).
type AllowRequest struct {
	Key         string           `json:"key,omitempty"`
	Limit       *LimitJSON       `json:"limit,omitempty"`
	Cost        *int64           `json:"cost,omitempty"`
	Domain      string           `json:"domain,omitempty"`
	Descriptors []DescriptorJSON `json:"descriptors,omitempty"`
	Hits        *int64           `json:"hits,omitempty"`
	// Priority is the request's class, "critical", "normal" or
	// "sheddable" (floodgate.Priority), in either form; empty for none,
	// which in the descriptors form is each matched rule's default class
	// (its descriptor's priority in the config). POST /v1/allow only.
	Priority string `json:"priority,omitempty"`
	// MaxWaitMS asks for the earliest slot within this many milliseconds
	// (0 to 3,600,000) when none is free now, in either form (see
	// docs/waiting.md). POST /v1/allow holds the response until the slot
	// comes; POST /v1/reservations answers at once with wait_ms (or holds
	// too, with hold). Only a gcra limit waits, and only one limit per
	// request.
	MaxWaitMS *int64 `json:"max_wait_ms,omitempty"`
}

// priority is req's class, checked: another name than the three is a
// 400 naming "priority".
func (req *AllowRequest) priority() (floodgate.Priority, error) {
	if req.Priority == "" {
		return "", nil
	}
	p, err := floodgate.ParsePriority(req.Priority)
	if err != nil {
		return "", invalid("priority", "%q is not critical, normal or sheddable", req.Priority)
	}
	return p, nil
}

// noPriority refuses a class on an endpoint that does not take one.
func (req *AllowRequest) noPriority(what string) error {
	if req.Priority != "" {
		return invalid("priority", "%s take no priority class; it is for POST /v1/allow", what)
	}
	return nil
}

// DecisionJSON is one decision. Times are whole milliseconds, rounded up;
// retry_after_ms is -1 when the request can never be admitted.
type DecisionJSON struct {
	Allowed      bool       `json:"allowed"`
	Code         string     `json:"code,omitempty"`
	Limit        int64      `json:"limit"`
	Remaining    int64      `json:"remaining"`
	ResetAfterMS int64      `json:"reset_after_ms"`
	RetryAfterMS int64      `json:"retry_after_ms"`
	Rule         string     `json:"rule,omitempty"`
	Policy       *LimitJSON `json:"policy,omitempty"`
	Unlimited    bool       `json:"unlimited,omitempty"`
	ShadowMode   bool       `json:"shadow_mode,omitempty"`
	// QuotaMode: the descriptor was decided as a quota (its rule's
	// quota_mode, or serve -quota-mode); see QuotaCode.
	QuotaMode  bool `json:"quota_mode,omitempty"`
	StoreError bool `json:"store_error,omitempty"`
	// StoreFull: the memory store is at one of its bounds (-max-keys,
	// -max-memory, -max-holds-per-key) and refused the descriptor, which
	// is denied whatever the failure mode (memstore.ErrFull).
	StoreFull bool `json:"store_full,omitempty"`
	// LedgerError: a durable quota's ledger failed (ledger.ErrLedger),
	// which denies whatever the failure mode.
	LedgerError bool `json:"ledger_error,omitempty"`
	// Fallback: decided by the failure mode local in this instance's
	// memory, with its share of the limit, while the store is failing.
	Fallback bool `json:"fallback,omitempty"`
	// NoRule: the descriptor matched no rule of its domain (or the domain
	// is not in the config), so nothing limited it.
	NoRule bool `json:"no_rule,omitempty"`
	// Limits: for a descriptor of several limits (rate_limits, or an
	// override's), each limit's decision in order; the fields above are
	// the most restrictive's (server.Restrictive).
	Limits []LimitDecisionJSON `json:"limits,omitempty"`
	// Override: an override (POST /v1/overrides) set the descriptor's
	// limits; Plan names its plan.
	Override bool   `json:"override,omitempty"`
	Plan     string `json:"plan,omitempty"`
}

// LimitDecisionJSON is the decision of one limit of a descriptor of
// several.
type LimitDecisionJSON struct {
	Allowed      bool       `json:"allowed"`
	Code         string     `json:"code"`
	Limit        int64      `json:"limit"`
	Remaining    int64      `json:"remaining"`
	ResetAfterMS int64      `json:"reset_after_ms"`
	RetryAfterMS int64      `json:"retry_after_ms"`
	Policy       *LimitJSON `json:"policy"`
}

// AllowResponse is the answer of POST /v1/allow: the overall decision and,
// for descriptors, one per descriptor in order.
type AllowResponse struct {
	DecisionJSON
	// UnknownDomain: the request's domain is not in the config, so no
	// rule applied (each descriptor also says no_rule); a descriptor of a
	// known domain that matches no rule says only no_rule.
	UnknownDomain bool           `json:"unknown_domain,omitempty"`
	Descriptors   []DecisionJSON `json:"descriptors,omitempty"`
	// WaitedMS, for a request the service held until its slot
	// (max_wait_ms), is how long it held it, in milliseconds rounded up:
	// 0 when the slot was now.
	WaitedMS *int64 `json:"waited_ms,omitempty"`
}

func millisCeil(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func statusJSON(st server.Status) DecisionJSON { return decisionJSON(st, true) }

// decisionJSON is statusJSON, with the policy only if policy is set.
func decisionJSON(st server.Status, policy bool) DecisionJSON {
	ledgerFailed := errors.Is(st.Err, ledger.ErrLedger)
	full := errors.Is(st.Err, memstore.ErrFull)
	out := DecisionJSON{Allowed: st.Code == server.OK, Code: st.Code.String(), StoreError: st.Err != nil && !ledgerFailed && !full, StoreFull: full, LedgerError: ledgerFailed, ShadowMode: st.Shadow, Fallback: st.Decision.Fallback,
		NoRule: !st.Limited && st.Rule == nil, QuotaMode: st.Quota}
	if st.Rule != nil {
		out.Rule = st.Rule.ID
		out.Unlimited = st.Rule.Unlimited
	}
	if st.Limited {
		if policy {
			out.Policy = limitJSON(st.Limit)
		}
		d := st.Decision
		out.Limit, out.Remaining = d.Limit, d.Remaining
		out.ResetAfterMS, out.RetryAfterMS = millisCeil(d.ResetAfter), millisCeil(d.RetryAfter)
		if st.Shadow {
			out.RetryAfterMS = 0
		}
		out.Override, out.Plan = st.Override, st.Plan
		for _, ls := range st.Limits {
			ld := LimitDecisionJSON{Allowed: ls.Code == server.OK, Code: ls.Code.String(), Limit: ls.Decision.Limit, Remaining: ls.Decision.Remaining,
				ResetAfterMS: millisCeil(ls.Decision.ResetAfter), RetryAfterMS: millisCeil(ls.Decision.RetryAfter), Policy: limitJSON(ls.Limit)}
			if ls.Shadow {
				ld.RetryAfterMS = 0
			}
			out.Limits = append(out.Limits, ld)
		}
	}
	return out
}

// handleAllow answers POST /v1/allow: it reads the body, decides it in
// its inline or descriptor form, and writes the decisions with their
// header fields.
func (s *API) handleAllow(w http.ResponseWriter, r *http.Request) {
	var req AllowRequest
	if !decodeAllowJSON(w, r, &req) {
		return
	}
	inline, err := req.form()
	if err != nil {
		writeProblem(w, err)
		return
	}
	if req.MaxWaitMS != nil {
		s.allowWait(w, r, &req, inline)
		return
	}
	class, err := req.priority()
	if err != nil {
		writeProblem(w, err)
		return
	}
	var statuses []server.Status
	var overall server.Status
	var unknownDomain bool
	if inline {
		overall, err = s.allowInline(r.Context(), &req, class)
		statuses = []server.Status{overall}
	} else {
		var res server.Result
		res, err = s.allowDescriptors(r.Context(), &req, class)
		statuses, overall, unknownDomain = res.Statuses, Binding(res), res.UnknownDomain
		if err == nil && res.GlobalShadow {
			// The descriptors keep their denials; the answer is OK.
			resp := allowHead(inline, overall, statuses, false)
			resp.UnknownDomain = unknownDomain
			resp.Code, resp.Allowed, resp.ShadowMode = server.OK.String(), true, true
			writeAllowAnswer(w, &resp, inline, &overall, statuses)
			return
		}
	}
	if err != nil {
		writeProblem(w, err)
		return
	}
	resp := allowHead(inline, overall, statuses, false)
	resp.UnknownDomain = unknownDomain
	writeAllowAnswer(w, &resp, inline, &overall, statuses)
}

// form reports whether the body is in the inline form (key and limit)
// rather than the descriptor form (domain and descriptors), and an error
// when it is both or neither.
func (req *AllowRequest) form() (inline bool, err error) {
	inline = req.Key != "" || req.Limit != nil || req.Cost != nil
	byConfig := req.Domain != "" || req.Descriptors != nil || req.Hits != nil
	switch {
	case inline && byConfig:
		return false, invalid("body", "give either key and limit, or domain and descriptors, not both")
	case !inline && !byConfig:
		return false, invalid("body", "give either key and limit (an inline limit), or domain and descriptors (config rules)")
	}
	return inline, nil
}

// allowInline decides the inline form.
func (s *API) allowInline(ctx context.Context, req *AllowRequest, class floodgate.Priority) (server.Status, error) {
	lim, cost, err := req.inlineLimit()
	if err != nil {
		return server.Status{}, err
	}
	return s.srv.DecideInlinePriority(ctx, req.Key, lim, cost, class)
}

// allowDescriptors decides the descriptor form.
func (s *API) allowDescriptors(ctx context.Context, req *AllowRequest, class floodgate.Priority) (server.Result, error) {
	ds, hits, err := req.descriptors()
	if err != nil {
		return server.Result{}, err
	}
	for i := range ds {
		ds[i].Priority = class
	}
	return s.srv.Decide(ctx, req.Domain, ds, hits)
}

// inlineLimit is the limit and the cost of the inline form.
func (req *AllowRequest) inlineLimit() (floodgate.Limit, int64, error) {
	if req.Limit == nil {
		return floodgate.Limit{}, 0, invalid("limit", "required with key")
	}
	lim, err := req.Limit.toLimit("limit")
	if err != nil {
		return floodgate.Limit{}, 0, err
	}
	cost := int64(1)
	if req.Cost != nil {
		cost = *req.Cost
	}
	return lim, cost, nil
}

// allowResponse is the body answering statuses: the overall decision
// and, for the descriptor form, one per descriptor.
func allowResponse(inline bool, overall server.Status, statuses []server.Status) AllowResponse {
	resp := allowHead(inline, overall, statuses, inline)
	if inline {
		return resp
	}
	resp.Descriptors = make([]DecisionJSON, len(statuses))
	for i, st := range statuses {
		resp.Descriptors[i] = statusJSON(st)
	}
	return resp
}

// allowHead is allowResponse without its descriptors, and without the
// inline form's policy unless policy is set: what writeAllowAnswer
// completes on its stack.
func allowHead(inline bool, overall server.Status, statuses []server.Status, policy bool) AllowResponse {
	// The overall decision of the descriptor form has no policy of its
	// own (each descriptor has its own): it is left out rather than built
	// and dropped.
	resp := AllowResponse{DecisionJSON: decisionJSON(overall, policy)}
	if inline {
		return resp
	}
	resp.Rule, resp.NoRule = "", false
	resp.Limits, resp.Override, resp.Plan = nil, false, ""
	resp.Code = server.QuotaCode(statuses).String()
	resp.Allowed = resp.Code == "OK"
	return resp
}

// writeAllow writes resp with the RateLimit fields of statuses: 200, or
// 503 with Retry-After when a store failure was answered by fail_closed.
func writeAllow(w http.ResponseWriter, resp any, overall server.Status, statuses []server.Status) {
	SetHeaders(w.Header(), statuses)
	if server.FailedClosed(statuses) {
		setFailedClosed(w.Header(), overall)
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// setFailedClosed sets the Retry-After of an answer that fail_closed
// denied: at least a second.
func setFailedClosed(h http.Header, overall server.Status) {
	retry := max(time.Second, overall.Decision.RetryAfter)
	h.Set(ratelimitheader.HeaderRetryAfter, ratelimitheader.RetryAfter(retry))
}

// Binding picks the status that decides a request: the first over-limit
// descriptor with the longest wait, or else the limited descriptor with the
// least remaining; a zero Status if none was limited.
func Binding(res server.Result) server.Status {
	best := -1
	for i, st := range res.Statuses {
		if !st.Limited {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := res.Statuses[best]
		switch {
		case st.Code == server.OverLimit && b.Code != server.OverLimit:
			best = i
		case st.Code == server.OverLimit && b.Code == server.OverLimit:
			if st.Decision.RetryAfter == floodgate.Never || (b.Decision.RetryAfter != floodgate.Never && st.Decision.RetryAfter > b.Decision.RetryAfter) {
				best = i
			}
		case st.Code == b.Code && st.Decision.Remaining < b.Decision.Remaining:
			best = i
		}
	}
	if best < 0 {
		return server.Status{Code: res.Code}
	}
	return res.Statuses[best]
}

// SetHeaders writes the RateLimit-Policy and RateLimit fields of every
// limited descriptor that the store answered, and Retry-After when one of
// them denied, as ratelimitheader.SetEach does (with the values of every
// field in one allocation: this runs at every decision).
func SetHeaders(h http.Header, statuses []server.Status) {
	var limitBuf [maxStackHeaders]floodgate.Limit
	var decisionBuf [maxStackHeaders]floodgate.Decision
	limits, ds := limitBuf[:0], decisionBuf[:0]
	for _, st := range statuses {
		if st.Limited && st.Err == nil {
			limits = append(limits, st.Limit)
			d := st.Decision
			if st.Shadow {
				d.Allowed, d.RetryAfter = true, 0
			}
			ds = append(ds, d)
		}
	}
	if len(limits) == 0 {
		return
	}
	for _, name := range headerNames {
		delete(h, name)
	}
	fields := ratelimitheader.Fields(limits, ds, nil)
	values := make([]string, len(fields))
	for i, f := range fields {
		values[i] = f.Value
		h[f.Name] = values[i : i+1 : i+1]
	}
}

// maxStackHeaders is how many limited descriptors SetHeaders gathers
// without allocating.
const maxStackHeaders = 4

// headerNames are the fields ratelimitheader.SetEach replaces.
var headerNames = [...]string{ratelimitheader.HeaderPolicy, ratelimitheader.HeaderRateLimit, ratelimitheader.HeaderRetryAfter,
	ratelimitheader.HeaderLegacyLimit, ratelimitheader.HeaderLegacyRemaining, ratelimitheader.HeaderLegacyReset}

// RuleJSON is one rule in GET /v1/config.
type RuleJSON struct {
	ID     string     `json:"id"`
	Domain string     `json:"domain"`
	Limit  *LimitJSON `json:"limit,omitempty"`
	// Limits are every limit of a rule of several (rate_limits); Limit
	// is the first.
	Limits      []*LimitJSON `json:"limits,omitempty"`
	Unlimited   bool         `json:"unlimited,omitempty"`
	ShadowMode  bool         `json:"shadow_mode,omitempty"`
	QuotaMode   bool         `json:"quota_mode,omitempty"`
	FailureMode string       `json:"failure_mode,omitempty"`
	Durable     bool         `json:"durable,omitempty"`
	Replaces    []string     `json:"replaces,omitempty"`
	// Priority is the rule's default class (its descriptor's priority).
	Priority string `json:"priority,omitempty"`
	// PriorityReserves are the rule's own reserves (priority_reserves),
	// each class's as the config writes it ("40%", "10" units); absent
	// for the default 5% and 20%.
	PriorityReserves map[string]string `json:"priority_reserves,omitempty"`
	// PriorityMax is the highest class a request may carry in its
	// domain's PriorityKey entry (priority_max).
	PriorityMax string `json:"priority_max,omitempty"`
	// PriorityKey is the domain's priority_key: the descriptor entry
	// whose value is a request's class.
	PriorityKey string `json:"priority_key,omitempty"`
	File        string `json:"file"`
	Line        int    `json:"line"`
	// Metadata is the rule's metadata, as the config gives it.
	Metadata map[string]any `json:"metadata,omitempty"`
}

func (s *API) handleConfig(w http.ResponseWriter, _ *http.Request) {
	out := struct {
		Rules []RuleJSON `json:"rules"`
	}{Rules: []RuleJSON{}}
	for _, d := range s.srv.Config().Domains() {
		for _, r := range d.Rules() {
			rj := RuleJSON{ID: r.ID, Domain: r.Domain, Unlimited: r.Unlimited, ShadowMode: r.ShadowMode,
				FailureMode: string(r.FailurePolicy), Durable: r.Limit.Durable, Replaces: r.Replaces, File: r.File, Line: r.Line,
				QuotaMode: r.QuotaMode, Metadata: r.Metadata, Priority: string(r.Priority)}
			rj.PriorityMax, rj.PriorityKey = string(r.PriorityMax), d.PriorityKey
			if rs := r.Reserves; rs != nil {
				rj.PriorityReserves = map[string]string{"normal": rs.Normal.String(), "sheddable": rs.Sheddable.String()}
			}
			if !r.Unlimited {
				rj.Limit = limitJSON(r.Limit)
			}
			if len(r.Limits) > 1 {
				for _, l := range r.Limits {
					rj.Limits = append(rj.Limits, limitJSON(l))
				}
			}
			out.Rules = append(out.Rules, rj)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// decodeJSON reads a JSON body strictly (size-limited, unknown fields and
// trailing data rejected), answering 400 itself on failure. The
// Content-Type is not checked: `curl -d` sends a form type, and the body
// must be JSON whatever it says.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	buf := getBuffer()
	defer putBuffer(buf)
	body, err := readBody(w, r, buf)
	if err != nil {
		writeProblem(w, jsonError(err))
		return false
	}
	return decodeBody(w, body, v)
}

// decodeAllowJSON is decodeJSON for the body of POST /v1/allow: read by
// decodeAllow, or by decodeBody (encoding/json) when decodeAllow
// declines it, so that every error is encoding/json's. req must be
// zero.
func decodeAllowJSON(w http.ResponseWriter, r *http.Request, req *AllowRequest) bool {
	buf := getBuffer()
	defer putBuffer(buf)
	body, err := readBody(w, r, buf)
	if err != nil {
		writeProblem(w, jsonError(err))
		return false
	}
	if decodeAllow(body, req) {
		return true
	}
	// A value of its own, so that req (which the caller keeps on its
	// stack) is not handed to encoding/json as an interface.
	slow := new(AllowRequest)
	ok := decodeBody(w, body, slow)
	*req = *slow
	return ok
}

// readBody reads r's body into buf, at most MaxBodyBytes. It reads the
// body itself rather than through http.MaxBytesReader (an allocation per
// request); a body over the bound is read again through one, for its
// error and so that the server closes the connection, as it does after
// MaxBytesReader refused a body.
func readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) ([]byte, error) {
	for buf.Len() <= MaxBodyBytes {
		buf.Grow(bytes.MinRead)
		b := buf.AvailableBuffer()
		b = b[:min(cap(b), MaxBodyBytes+1-buf.Len())]
		n, err := r.Body.Read(b)
		buf.Write(b[:n])
		if err == io.EOF {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
	rest := io.MultiReader(bytes.NewReader(buf.Bytes()), r.Body)
	_, err := io.Copy(io.Discard, http.MaxBytesReader(w, io.NopCloser(rest), MaxBodyBytes))
	if err == nil {
		// Not reached: the bytes read are over the bound already.
		err = &http.MaxBytesError{Limit: MaxBodyBytes}
	}
	return nil, err
}

// decodeBody decodes body, read by readBody, into v as decodeJSON does.
func decodeBody(w http.ResponseWriter, body []byte, v any) bool {
	// encoding/json reads invalid UTF-8 in a string as U+FFFD, so keys
	// that differ only there would share a budget: refuse them, as
	// POST /json (protojson) and gRPC do.
	if !utf8.Valid(body) {
		writeProblem(w, invalid("body", "not valid UTF-8 (at byte %d)", invalidUTF8At(body)))
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		writeProblem(w, jsonError(err))
		return false
	}
	// The same for a \u escape of half a surrogate pair, which it also
	// reads as U+FFFD.
	if field, ok := loneSurrogate(body); ok {
		writeProblem(w, invalid(field, "a \\u escape of half a UTF-16 surrogate pair (\\ud800 to \\udfff) without its other half, which is no character"))
		return false
	}
	return true
}

// decodeStrict decodes body, a whole JSON value and nothing after it,
// into v, refusing unknown fields.
//
// A json.Decoder allocates about ten times before its first value (itself,
// its buffer, its scanners' stacks, which grow with each level of nesting):
// half of what decoding a small body allocates. So a decoder that decoded
// a body without error is kept, reading the next body from the same
// bytes.Reader once reset, its buffer and stacks grown. One that failed is
// dropped (its state is not the start of a stream), and a failure is
// always decoded again by a new decoder, so that an error, its byte
// offset included, is exactly that of a decoder that saw only this body.
func decodeStrict(body []byte, v any) error {
	d := decoders.Get().(*decoder)
	d.src.Reset(body)
	err := decodeOne(d.dec, v)
	d.src.Reset(nil)
	if err == nil {
		if len(body) <= maxPooledBuffer {
			decoders.Put(d)
		}
		return nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return decodeOne(dec, v)
}

// decodeOne decodes the next value of dec into v, which must be the last.
func decodeOne(dec *json.Decoder, v any) error {
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON value")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("trailing data after the JSON value")
		}
	}
	return err
}

// decoder is a json.Decoder kept by decodeStrict, with its source.
type decoder struct {
	src bytes.Reader
	dec *json.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := new(decoder)
	d.dec = json.NewDecoder(&d.src)
	d.dec.DisallowUnknownFields()
	return d
}}

// invalidUTF8At is the offset of the first byte of b that is not valid
// UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonError names the field of a JSON decoding error.
func jsonError(err error) error {
	var maxErr *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &maxErr):
		return &httpError{status: http.StatusRequestEntityTooLarge, field: "body", msg: fmt.Sprintf("larger than %d bytes", maxErr.Limit)}
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return invalid(field, "want %s, not a JSON %s", typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return invalid("body", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.EOF):
		return invalid("body", "empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "truncated JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		if name == "" {
			return invalid("body", `unknown field ""`)
		}
		return invalid(name, "unknown field")
	}
	return invalid("body", "%v", err)
}

// invalid is the error of a field of a request the caller got wrong: 400.
func invalid(field, format string, args ...any) error { return server.Invalid(field, format, args...) }

// httpError is a caller's error with its own status.
type httpError struct {
	status int
	field  string
	msg    string
}

func (e *httpError) Error() string { return e.field + ": " + e.msg }

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
}

// writeProblem answers err as a problem: 400 naming the field of a
// *floodgate.FieldError, the status of an httpError, 503 for a failure
// of the store or the ledger.
func writeProblem(w http.ResponseWriter, err error) {
	p := problemOf(err)
	WriteProblem(w, p.Status, p.Field, p.Detail)
}

// problemOf is the problem writeProblem answers err with.
func problemOf(err error) Problem {
	p := Problem{Type: "about:blank", Status: http.StatusInternalServerError, Detail: err.Error()}
	var fe *floodgate.FieldError
	var he *httpError
	switch {
	case errors.As(err, &he):
		p.Status, p.Field, p.Detail = he.status, he.field, he.Error()
	case errors.As(err, &fe):
		p.Status, p.Field, p.Detail = http.StatusBadRequest, fe.Field, fe.Field+": "+fe.Problem
	case errors.Is(err, floodgate.ErrNotSupported):
		p.Status = http.StatusNotImplemented
	case errors.Is(err, floodgate.ErrConflict):
		p.Status, p.Field = http.StatusUnprocessableEntity, "id"
	case errors.Is(err, floodgate.ErrUnknownReservation):
		p.Status, p.Field = http.StatusNotFound, "id"
	case errors.Is(err, ledger.ErrLedger):
		p.Status, p.Detail = http.StatusServiceUnavailable, "ledger failed: "+err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		p.Status = http.StatusServiceUnavailable
	default:
		p.Status, p.Detail = http.StatusServiceUnavailable, "store failed: "+err.Error()
	}
	return p
}

// WriteProblem answers an RFC 9457 problem details body (Problem) of
// status, naming field (none if empty), with detail, as every HTTP
// endpoint of floodgate serve does: Content-Type
// application/problem+json, Cache-Control no-store.
func WriteProblem(w http.ResponseWriter, status int, field, detail string) {
	p := Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Field: field}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The body is JSON for a client, never HTML: "Bearer <token>" stays
	// readable instead of "\u003ctoken\u003e".
	enc.SetEscapeHTML(false)
	enc.Encode(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := getBuffer()
	defer putBuffer(buf)
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		writeProblem(w, err)
		return
	}
	// Shared values (their capacity is their length, so that an Add
	// elsewhere copies rather than writes into them): Header.Set would
	// allocate a slice for each at every answer.
	h := w.Header()
	h["Content-Type"], h["Cache-Control"] = jsonType, noStore
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

var (
	jsonType = []string{"application/json"}
	noStore  = []string{"no-store"}
)

// buffers holds the buffers of request and response bodies; one larger
// than maxPooledBuffer is dropped rather than kept.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuffer = 64 << 10

func getBuffer() *bytes.Buffer { return buffers.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBuffer {
		return
	}
	b.Reset()
	buffers.Put(b)
}
