package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/server/ui"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// openAPIYAML is the config of the OpenAPI test: a rule of each kind the
// answers describe differently.
const openAPIYAML = `
domain: api
priority_key: class
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}
  - key: login
    rate_limit: {name: login, unit: minute, requests_per_unit: 1, algorithm: gcra, burst: 2}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: tenant
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plan
    value: free
    rate_limit: {name: free, unit: hour, requests_per_unit: 100}
  - key: plan
    value: trial
    rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: free}]}
  - key: payment
    rate_limit: {unit: second, requests_per_unit: 5, failure_mode: fail_closed}
  - key: job
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency, failure_mode: fail_closed}
  - key: export
    priority: sheddable
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}
  - key: batch
    priority: sheddable
    priority_max: normal
    priority_reserves: {normal: 1, sheddable: 40%}
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}
  - key: account
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: account_second}
      - {unit: day, requests_per_unit: 100, name: account_day}
plans:
  pro:
    - {unit: second, requests_per_unit: 20}
    - {unit: day, requests_per_unit: 1000}
`

// brokenStore fails every call: Apply, Reset and Ping.
type brokenStore struct{}

var errRefused = fmt.Errorf("%w: dial tcp 127.0.0.1:6379: connect: connection refused", floodgate.ErrStore)

func (brokenStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, errRefused
}
func (brokenStore) Reset(context.Context, string, floodgate.Limit) error { return errRefused }
func (brokenStore) Ping(context.Context) error                           { return errRefused }
func (brokenStore) Reserve(context.Context, floodgate.HoldRequest) (floodgate.HoldResult, error) {
	return floodgate.HoldResult{}, errRefused
}
func (brokenStore) Settle(context.Context, floodgate.SettleRequest) ([]floodgate.Settlement, error) {
	return nil, errRefused
}

// hourly is a clock that moves an hour on from each reading to the next,
// so that every reservation has expired by its next step.
type hourly struct {
	mu  sync.Mutex
	now time.Time
}

func (c *hourly) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Hour)
	return c.now
}

// applyOnly hides every ability of a store but Apply, such as Reset.
type applyOnly struct{ s floodgate.Store }

func (a applyOnly) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	return a.s.Apply(ctx, r)
}

// fixture is what a setup of openAPIServer sets: the server's options,
// and the tokens of its API and dashboard.
type fixture struct {
	server.Options
	Auth *transport.Auth
	// Ledger gives the API overrides, in an SQLite ledger; LedgerDown
	// closes that ledger, so that every call of it fails.
	Ledger, LedgerDown bool
	// MaxHeld is the API's (httpapi.Options.MaxHeld).
	MaxHeld int
}

// openAPIServer returns the API of a Server with openAPIYAML and a fake
// clock, on a memory store unless setup (if not nil) sets opts otherwise,
// and the extra handlers that `floodgate serve` passes to Handler. mem
// returns a new memory store on the same clock.
func openAPIServer(t *testing.T, setup func(opts *fixture, mem func() floodgate.Store)) (*httpapi.API, map[string]http.Handler) {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	mem := func() floodgate.Store {
		ms := memstore.New(&memstore.Options{Clock: clock})
		t.Cleanup(func() { ms.Close() })
		return ms
	}
	var fx fixture
	if setup != nil {
		setup(&fx, mem)
	}
	opts := fx.Options
	if opts.Store == nil {
		opts.Store = mem()
	}
	d, err := config.Parse("api.yaml", []byte(openAPIYAML))
	if err != nil {
		t.Fatal(err)
	}
	if opts.Config, err = config.New(d); err != nil {
		t.Fatal(err)
	}
	if opts.Limiter.Clock == nil {
		opts.Limiter.Clock = clock
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	extra := map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)}
	dash := ui.New(srv, &ui.Options{Auth: fx.Auth})
	t.Cleanup(dash.Close)
	maps.Copy(extra, dash.Handlers())
	api, err := httpapi.New(srv, &httpapi.Options{Auth: fx.Auth, IDKeys: [][]byte{httpapi.TestIDKey}, Overrides: overrideSync(t, srv, fx.Ledger, fx.LedgerDown),
		MaxHold: time.Hour, MaxHeld: fx.MaxHeld})
	if err != nil {
		t.Fatal(err)
	}
	// The exchanges are about the answer, not the wait (wait_test.go).
	instantHolds(api)
	return api, extra
}

// The tokens of the "auth" fixture.
const (
	clientToken = "client-0123456789abcdef"
	adminToken  = "admin-0123456789abcdef"
)

var (
	asClient = map[string]string{"Authorization": "Bearer " + clientToken}
	asAdmin  = map[string]string{"Authorization": "Bearer " + adminToken}
)

// tokenAuth is a transport.Auth of one client and one admin token.
func tokenAuth(t *testing.T) *transport.Auth {
	t.Helper()
	dir := t.TempDir()
	client, admin := filepath.Join(dir, "client"), filepath.Join(dir, "admin")
	if err := os.WriteFile(client, []byte(clientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(admin, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := transport.LoadAuth(client, admin)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// exchange is one request of the OpenAPI test and what must come back.
type exchange struct {
	name string
	// fixture names the server: "" the memory store, "down" a store that
	// fails every call, "local" the same with the failure mode local,
	// "no reset" a memory store that cannot reset.
	fixture      string
	method, path string
	accept       string
	body         string
	// reqHeader are the request's own header fields (Idempotency-Key).
	reqHeader map[string]string
	// invalid says that the document rejects the request, as the server
	// does; the others must pass the document's request validation.
	invalid bool
	status  int
	// want are texts the body must hold, and header values the response
	// must have ("" for absent), so that each case shows what its name
	// says.
	want   []string
	header map[string]string
}

// waitBody waits up to an hour for one of 1 per 30 minutes, one at a time.
const waitBody = `{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "30m", "burst": 1}, "max_wait_ms": 3600000}`

// allowWaitBody waits up to an hour on POST /v1/allow for one of 1 per
// 30 minutes, named wa.
const allowWaitBody = `{"key": "wa", "limit": {"algorithm": "gcra", "limit": 1, "period": "30m", "burst": 1, "name": "wa"}, "max_wait_ms": 3600000}`

// loginWait is a wait of hits on the rule login (1 per minute, burst 2)
// for user id, with extra fields.
func loginWait(id string, hits, maxWaitMS int, extra string) string {
	return fmt.Sprintf(`{"domain": "api", "descriptors": [{"entries": [{"key": "login", "value": %q}]}], "hits": %d, "max_wait_ms": %d%s}`, id, hits, maxWaitMS, extra)
}

// reserveBody reserves 40 of 100 per hour; with idemKey its id is
// reservationID.
const reserveBody = `{"key": "llm:acme", "limit": {"limit": 100, "period": "1h"}, "cost": 40, "ttl_ms": 60000}`

var (
	idemKey        = map[string]string{"Idempotency-Key": "4a2f1c9e-7b3d-4e8a-9c61-2d5f0b7e8a13"}
	reservationID  = httpapi.ReservationToken(idemKey["Idempotency-Key"], "llm:acme", floodgate.Limit{Limit: 100, Period: time.Hour}, 40, start.Add(time.Minute))
	leaseID        = httpapi.LeaseToken("6f1c2a9b8e7d4c3b", "worker:exports", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 4, Period: 30 * time.Second}, 1)
	idemKey2       = map[string]string{"Idempotency-Key": "0b9d2e41-5c7a-4f3e-8d12-6a4e9c0f1b27"}
	reservationID2 = httpapi.ReservationToken(idemKey2["Idempotency-Key"], "llm:acme", floodgate.Limit{Limit: 100, Period: time.Hour}, 40, start.Add(time.Minute))
	// forgedID is reservationID with one unit more held: its tag no longer
	// matches.
	forgedID = httpapi.ReservationToken(idemKey["Idempotency-Key"], "llm:acme", floodgate.Limit{Limit: 100, Period: time.Hour}, 41, start.Add(time.Minute))[:strings.LastIndex(reservationID, ".")] + reservationID[strings.LastIndex(reservationID, "."):]
)

const (
	inlineLimit = `{"key": "user:42", "limit": {"limit": 2, "period": "1m", "name": "per_user"}}`
	userEntry   = `{"entries": [{"key": "user", "value": "%s"}]}`
)

func descriptors(ds ...string) string {
	return `{"domain": "api", "descriptors": [` + strings.Join(ds, ", ") + `]}`
}

func user(id string) string { return fmt.Sprintf(userEntry, id) }

// prioBody asks for cost of 5 per minute (GCRA) on one key, in class p.
func prioBody(p string, cost int) string {
	return fmt.Sprintf(`{"key": "prio", "limit": {"algorithm": "gcra", "limit": 5, "period": "1m"}, "cost": %d, "priority": %q}`, cost, p)
}

// big is a body just over httpapi.MaxBodyBytes that the document accepts,
// since a schema cannot bound a body's size.
func big(prefix, suffix string) string {
	return prefix + strings.Repeat("x", httpapi.MaxBodyBytes) + suffix
}

var exchanges = []exchange{
	// POST /v1/allow, inline.
	{name: "inline allowed", method: "POST", path: "/v1/allow", body: inlineLimit, status: 200,
		want:   []string{`"allowed":true`, `"remaining":1`, `"policy":{"algorithm":"fixed_window","limit":2,"period":"1m0s","name":"per_user"}`},
		header: map[string]string{"RateLimit-Policy": `"per_user";q=2;w=60`, "RateLimit": `"per_user";r=1;t=60`, "Retry-After": "", "Cache-Control": "no-store"}},
	{name: "inline peek", method: "POST", path: "/v1/allow", body: strings.Replace(inlineLimit, `}}`, `}, "cost": 0}`, 1), status: 200,
		want: []string{`"allowed":true`, `"remaining":1`}},
	{name: "inline last", method: "POST", path: "/v1/allow", body: inlineLimit, status: 200,
		want: []string{`"allowed":true`, `"remaining":0`}},
	{name: "inline denied", method: "POST", path: "/v1/allow", body: inlineLimit, status: 200,
		want:   []string{`"allowed":false`, `"code":"OVER_LIMIT"`, `"retry_after_ms":60000`},
		header: map[string]string{"Retry-After": "60", "RateLimit": `"per_user";r=0;t=60`}},
	{name: "inline never", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 2, "period": "1m"}, "cost": 3}`, status: 200,
		want: []string{`"allowed":false`, `"retry_after_ms":-1`}, header: map[string]string{"Retry-After": ""}},
	{name: "inline gcra burst", method: "POST", path: "/v1/allow", body: `{"key": "g", "limit": {"algorithm": "gcra", "limit": 10, "period": "1s", "burst": 20}}`, status: 200,
		want: []string{`"limit":20`, `"remaining":19`, `"burst":20`}, header: map[string]string{"RateLimit-Policy": `"default";q=20;w=2`}},
	{name: "reset", method: "POST", path: "/v1/reset", body: inlineLimit, status: 204},
	{name: "inline after reset", method: "POST", path: "/v1/allow", body: inlineLimit, status: 200,
		want: []string{`"allowed":true`, `"remaining":1`}},

	// POST /v1/allow, descriptors.
	{name: "descriptors", method: "POST", path: "/v1/allow", body: descriptors(user("42"), `{"entries": [{"key": "path", "value": "/health"}]}`), status: 200,
		want:   []string{`"allowed":true`, `"descriptors":[{"allowed":true,"code":"OK","limit":2,"remaining":1,`, `"rule":"api|user"`, `"rule":"api|path=/health"`, `"unlimited":true`},
		header: map[string]string{"RateLimit-Policy": `"per_user";q=2;w=60`}},
	{name: "descriptors hits 2", method: "POST", path: "/v1/allow", body: strings.Replace(descriptors(user("7")), `{"domain"`, `{"hits": 2, "domain"`, 1), status: 200,
		want: []string{`"allowed":true`, `"remaining":0`}},
	{name: "descriptors denied", method: "POST", path: "/v1/allow", body: descriptors(user("7")), status: 200,
		want: []string{`"allowed":false`, `"code":"OVER_LIMIT"`, `"retry_after_ms":60000`}, header: map[string]string{"Retry-After": "60"}},
	{name: "descriptors peek", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "user", "value": "8"}], "hits": 0}`), status: 200,
		want: []string{`"remaining":2`}},
	{name: "shadow mode counts", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "tenant", "value": "acme"}]}`), status: 200,
		want: []string{`"allowed":true`}},
	{name: "shadow mode denial", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "tenant", "value": "acme"}]}`), status: 200,
		want: []string{`"allowed":true`, `"shadow_mode":true`, `"retry_after_ms":0`}, header: map[string]string{"Retry-After": ""}},
	{name: "replaces", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "plan", "value": "free"}]}`, `{"entries": [{"key": "plan", "value": "trial"}]}`), status: 200,
		want: []string{`{"allowed":true,"code":"OK","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"rule":"api|plan=free"}`, `"rule":"api|plan=trial"`}},
	{name: "override limit", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "plan", "value": "trial"}], "limit": {"limit": 5, "period": "1m"}}`), status: 200,
		want: []string{`"remaining":4`, `"policy":{"algorithm":"fixed_window","limit":5,"period":"1m0s"}`}},
	{name: "gcra rule", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "login", "value": "x"}]}`), status: 200,
		want: []string{`"limit":2`, `"remaining":1`}, header: map[string]string{"RateLimit-Policy": `"login";q=2;w=120`}},
	{name: "unknown domain", method: "POST", path: "/v1/allow", body: `{"domain": "nope", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`, status: 200,
		want: []string{`"allowed":true`}, header: map[string]string{"RateLimit-Policy": "", "RateLimit": ""}},

	// POST /v1/allow with a priority class: of 5 per minute (GCRA), a
	// sheddable request may take 4 (the last 20%, 1 unit, is kept),
	// a critical one the last.
	{name: "priority sheddable", method: "POST", path: "/v1/allow", body: prioBody("sheddable", 4), status: 200,
		want: []string{`"allowed":true`, `"limit":4`, `"remaining":0`}},
	{name: "priority sheddable at the reserve", method: "POST", path: "/v1/allow", body: prioBody("sheddable", 1), status: 200,
		want: []string{`"allowed":false`, `"limit":4`}},
	{name: "priority normal at the reserve", method: "POST", path: "/v1/allow", body: prioBody("normal", 1), status: 200,
		want: []string{`"allowed":false`}},
	{name: "priority critical takes the reserve", method: "POST", path: "/v1/allow", body: prioBody("critical", 1), status: 200,
		want: []string{`"allowed":true`, `"limit":5`, `"remaining":0`}},
	{name: "priority unknown", method: "POST", path: "/v1/allow", body: prioBody("urgent", 1), invalid: true, status: 400,
		want: []string{`"field":"priority"`, `urgent`}},
	{name: "priority on a token bucket", method: "POST", path: "/v1/allow", body: `{"key": "tb", "limit": {"algorithm": "token_bucket", "limit": 5, "period": "1m"}, "priority": "sheddable"}`, status: 400,
		want: []string{`"field":"priority"`, "only gcra and fixed_window"}},
	{name: "priority rule default", method: "POST", path: "/v1/allow", body: `{"domain": "api", "hits": 4, "descriptors": [{"entries": [{"key": "export", "value": "nightly"}]}]}`, status: 200,
		want: []string{`"allowed":true`, `"limit":4`, `"remaining":0`}},
	{name: "priority rule default at the reserve", method: "POST", path: "/v1/allow", body: `{"domain": "api", "descriptors": [{"entries": [{"key": "export", "value": "nightly"}]}]}`, status: 200,
		want: []string{`"allowed":false`}},
	{name: "priority critical over the rule default", method: "POST", path: "/v1/allow", body: `{"domain": "api", "priority": "critical", "descriptors": [{"entries": [{"key": "export", "value": "nightly"}]}]}`, status: 200,
		want: []string{`"allowed":true`, `"limit":5`, `"remaining":0`}},
	// A class carried in the domain's priority_key entry, held to the
	// rule's priority_max (normal keeps 1 of 5).
	{name: "priority carried in an entry", method: "POST", path: "/v1/allow", body: `{"domain": "api", "descriptors": [{"entries": [{"key": "batch", "value": "b"}, {"key": "class", "value": "critical"}]}]}`, status: 200,
		want: []string{`"allowed":true`, `"limit":4`, `"remaining":3`, `"rule":"api|batch"`}},
	{name: "priority on a fixed window with count_rejected", method: "POST", path: "/v1/allow", body: `{"domain": "api", "priority": "normal", "descriptors": [{"entries": [{"key": "x"}], "limit": {"limit": 5, "period": "1m", "count_rejected": true}}]}`, status: 400,
		want: []string{`"field":"descriptors[0].priority"`, "fixed_window without count_rejected"}},
	{name: "priority on a lease", method: "POST", path: "/v1/leases", body: `{"key": "worker:x", "limit": {"algorithm": "concurrency", "limit": 2, "period": "30s"}, "priority": "critical"}`, status: 400,
		want: []string{`"field":"priority"`, "leases take no priority class"}},

	// POST /v1/inspect and POST /v1/reset of a descriptor's key.
	{name: "inspect descriptor", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "user", "value": "42"}]}`, status: 200,
		want:   []string{`"allowed":true`, `"remaining":1`, `"limit":2`, `"rule":"api|user"`, `"store_key":"d|api|user=42"`, `"policy":{"algorithm":"fixed_window","limit":2,"period":"1m0s","name":"per_user"}`},
		header: map[string]string{"Cache-Control": "no-store", "RateLimit": ""}},
	{name: "inspect takes nothing", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "user", "value": "42"}]}`, status: 200,
		want: []string{`"remaining":1`}},
	{name: "inspect inline", method: "POST", path: "/v1/inspect", body: inlineLimit, status: 200,
		want: []string{`"remaining":1`, `"store_key":"i|user:42"`}},
	{name: "inspect over limit", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "user", "value": "7"}]}`, status: 200,
		want: []string{`"allowed":false`, `"code":"OVER_LIMIT"`, `"remaining":0`}},
	{name: "reset descriptor", method: "POST", path: "/v1/reset", body: `{"domain": "api", "entries": [{"key": "user", "value": "7"}]}`, status: 204},
	{name: "inspect after reset", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "user", "value": "7"}]}`, status: 200,
		want: []string{`"allowed":true`, `"remaining":2`}},
	{name: "inspect override", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "plan", "value": "trial"}], "limit": {"limit": 5, "period": "1m"}}`, status: 200,
		want: []string{`"remaining":4`, `"store_key":"d|api|plan=trial"`}},
	{name: "inspect no rule", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "nothing", "value": "x"}]}`, status: 400,
		want: []string{`"field":"entries"`, "no rule"}},
	{name: "inspect unlimited", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "path", "value": "/health"}]}`, status: 400,
		want: []string{`"field":"entries"`, "unlimited"}},
	{name: "inspect both forms", method: "POST", path: "/v1/inspect", body: `{"key": "k", "domain": "api", "entries": [{"key": "user", "value": "1"}]}`, invalid: true, status: 400,
		want: []string{`"field":"body"`}},
	{name: "inspect without limit", method: "POST", path: "/v1/inspect", body: `{"key": "k"}`, invalid: true, status: 400,
		want: []string{`"field":"limit"`}},
	{name: "inspect empty entry key", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "", "value": "1"}]}`, invalid: true, status: 400,
		want: []string{`"field":"entries[0].key"`}},
	{name: "inspect too large", method: "POST", path: "/v1/inspect", body: big(`{"key": "`, `", "limit": {"limit": 1, "period": "1s"}}`), status: 413,
		want: []string{`"field":"body"`}},
	{name: "inspect store down", fixture: "down", method: "POST", path: "/v1/inspect", body: `{"domain": "api", "entries": [{"key": "user", "value": "1"}]}`, status: 503,
		want: []string{"store failed"}},
	{name: "inspect without token", fixture: "auth", method: "POST", path: "/v1/inspect", body: inlineLimit, status: 401,
		want: []string{"bearer token is required"}, header: map[string]string{"WWW-Authenticate": `Bearer realm="floodgate"`}},
	{name: "inspect as client", fixture: "auth", method: "POST", path: "/v1/inspect", body: inlineLimit, reqHeader: asClient, status: 403,
		want: []string{"needs an admin token"}},
	{name: "inspect as admin", fixture: "auth", method: "POST", path: "/v1/inspect", body: inlineLimit, reqHeader: asAdmin, status: 200,
		want: []string{`"remaining":2`}},
	{name: "reset without token", fixture: "auth", method: "POST", path: "/v1/reset", body: inlineLimit, status: 401,
		want: []string{"bearer token is required"}},
	{name: "reset as client", fixture: "auth", method: "POST", path: "/v1/reset", body: inlineLimit, reqHeader: asClient, status: 403,
		want: []string{"needs an admin token"}},

	// The dashboard.
	{name: "dashboard", method: "GET", path: "/ui", status: 200,
		want:   []string{"<title>Floodgate dashboard</title>", `src="/ui/app.js"`},
		header: map[string]string{"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}},
	{name: "dashboard script", method: "GET", path: "/ui/app.js", status: 200, want: []string{`fetch("/ui/events"`}},
	{name: "dashboard style", method: "GET", path: "/ui/app.css", status: 200, want: []string{".card"}},
	{name: "dashboard icon", method: "GET", path: "/ui/favicon.svg", status: 200, want: []string{"<svg"}},
	{name: "dashboard no such file", method: "GET", path: "/ui/nope.js", status: 404, want: []string{`"field":"asset"`}},
	{name: "dashboard feed", method: "GET", path: "/ui/events?frames=1", status: 200,
		want: []string{"event: frame\ndata: {", `"admin":true`, `"rates":`, `"top_denied":{`, `"id":"api|user"`, `"source":"api.yaml:`}},
	{name: "the server's address", method: "GET", path: "/", status: 302, header: map[string]string{"Location": "/ui"}},
	{name: "dashboard with a slash", method: "GET", path: "/ui/", status: 302, header: map[string]string{"Location": "/ui"}},
	{name: "dashboard feed bad frames", method: "GET", path: "/ui/events?frames=0", invalid: true, status: 400, want: []string{`"field":"frames"`}},
	{name: "dashboard feed without token", fixture: "auth", method: "GET", path: "/ui/events?frames=1", status: 401},
	{name: "dashboard feed as client", fixture: "auth", method: "GET", path: "/ui/events?frames=1", reqHeader: asClient, status: 200,
		want: []string{`"admin":false`, `"series":[]`}},
	{name: "dashboard page without token", fixture: "auth", method: "GET", path: "/ui", status: 200},

	// POST /v1/allow, bad input.
	{name: "allow unknown field", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "colour": "red"}`, invalid: true, status: 400,
		want: []string{`"field":"colour"`}, header: map[string]string{"Cache-Control": "no-store"}},
	{name: "allow wrong type", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": "ten", "period": "1s"}}`, invalid: true, status: 400,
		want: []string{`"field":"limit.limit"`}},
	{name: "allow not JSON", method: "POST", path: "/v1/allow", body: `{"key":`, invalid: true, status: 400,
		want: []string{`"field":"body"`}},
	{name: "allow both forms", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "domain": "api"}`, invalid: true, status: 400,
		want: []string{`"field":"body"`, "not both"}},
	{name: "allow neither form", method: "POST", path: "/v1/allow", body: `{}`, invalid: true, status: 400,
		want: []string{`"field":"body"`}},
	{name: "allow key without limit", method: "POST", path: "/v1/allow", body: `{"key": "k"}`, invalid: true, status: 400,
		want: []string{`"field":"limit"`}},
	{name: "allow empty key", method: "POST", path: "/v1/allow", body: `{"key": "", "limit": {"limit": 1, "period": "1s"}}`, invalid: true, status: 400,
		want: []string{`"field":"key"`}},
	{name: "allow bad period", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 1, "period": "soon"}}`, invalid: true, status: 400,
		want: []string{`"field":"limit.period"`}},
	{name: "allow negative cost", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "cost": -1}`, invalid: true, status: 400,
		want: []string{`"field":"cost"`}},
	{name: "allow too many descriptors", method: "POST", path: "/v1/allow", body: descriptors(slices.Repeat([]string{user("1")}, server.MaxDescriptors+1)...), invalid: true, status: 400,
		want: []string{`"field":"descriptors"`}},
	{name: "allow empty entry key", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "", "value": "1"}]}`), invalid: true, status: 400,
		want: []string{`"field":"descriptors[0].entries[0].key"`}},
	// What a schema cannot say: the document accepts these, the server
	// answers 400, as the document's descriptions say it does.
	{name: "allow concurrency", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"algorithm": "concurrency", "limit": 1, "period": "1s"}}`, status: 400,
		want: []string{`"field":"limit.algorithm"`}},
	{name: "allow burst of a window", method: "POST", path: "/v1/allow", body: `{"key": "k", "limit": {"limit": 1, "period": "1s", "burst": 2}}`, status: 400,
		want: []string{`"field":"limit.burst"`}},
	{name: "allow too large", method: "POST", path: "/v1/allow", body: big(`{"key": "`, `", "limit": {"limit": 1, "period": "1s"}}`), status: 413,
		want: []string{`"status":413`, `"field":"body"`}, header: map[string]string{"Cache-Control": "no-store"}},

	// POST /v1/reservations and the steps after it.
	{name: "reserve", method: "POST", path: "/v1/reservations", body: reserveBody, reqHeader: idemKey, status: 200,
		want: []string{`"allowed":true`, `"remaining":60`, `"id":"` + reservationID + `"`, `"expires_at":`}},
	{name: "reserve retried", method: "POST", path: "/v1/reservations", body: reserveBody, reqHeader: idemKey, status: 200,
		want: []string{`"allowed":true`, `"remaining":60`, `"replayed":true`}},
	{name: "reserve key reused", method: "POST", path: "/v1/reservations", body: strings.Replace(reserveBody, `"cost": 40`, `"cost": 41`, 1), reqHeader: idemKey, status: 422,
		want: []string{`"status":422`}},
	{name: "reserve denied", method: "POST", path: "/v1/reservations", body: strings.Replace(reserveBody, `"cost": 40`, `"cost": 200`, 1), status: 200,
		want: []string{`"allowed":false`, `"retry_after_ms":-1`}, header: map[string]string{"Retry-After": ""}},
	{name: "reserve descriptors", method: "POST", path: "/v1/reservations", body: descriptors(user("r"), `{"entries": [{"key": "tenant", "value": "t"}]}`), status: 200,
		want: []string{`"allowed":true`, `"id":"r2.`, `"rule":"api|tenant"`}},
	{name: "reserve bad ttl", method: "POST", path: "/v1/reservations", body: `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "ttl_ms": 0}`, invalid: true, status: 400,
		want: []string{`"field":"ttl_ms"`}},
	{name: "reserve too large", method: "POST", path: "/v1/reservations", body: big(`{"key": "`, `", "limit": {"limit": 1, "period": "1s"}}`), status: 413,
		want: []string{`"field":"body"`}},
	{name: "reserve a slot now", method: "POST", path: "/v1/reservations", body: waitBody, status: 200,
		want: []string{`"allowed":true`, `"wait_ms":0`, `"id":"r2.`}},
	{name: "reserve a slot ahead", method: "POST", path: "/v1/reservations", body: waitBody, status: 200,
		want: []string{`"allowed":true`, `"wait_ms":`, `"remaining":0`, `"id":"r2.`}},
	{name: "reserve no slot within max_wait_ms", method: "POST", path: "/v1/reservations", body: strings.Replace(waitBody, `3600000`, `1000`, 1), status: 200,
		want: []string{`"allowed":false`, `"retry_after_ms":`}},
	{name: "reserve a slot of a window", method: "POST", path: "/v1/reservations", body: `{"key": "w2", "limit": {"limit": 1, "period": "1h"}, "max_wait_ms": 1000}`, status: 400,
		want: []string{`"field":"limit.algorithm"`}},
	{name: "reserve bad max_wait_ms", method: "POST", path: "/v1/reservations", body: strings.Replace(waitBody, `3600000`, `-1`, 1), invalid: true, status: 400,
		want: []string{`"field":"max_wait_ms"`}},
	{name: "reserve descriptors a slot now", method: "POST", path: "/v1/reservations", body: loginWait("r", 2, 3600000, ""), status: 200,
		want: []string{`"allowed":true`, `"wait_ms":0`, `"id":"r2.`, `"rule":"api|login"`}},
	{name: "reserve descriptors a slot ahead", method: "POST", path: "/v1/reservations", body: loginWait("r", 1, 3600000, ""), status: 200,
		want: []string{`"allowed":true`, `"wait_ms":60000`, `"id":"r2.`}},
	{name: "reserve descriptors no slot within max_wait_ms", method: "POST", path: "/v1/reservations", body: loginWait("r", 1, 60000, ""), status: 200,
		want: []string{`"allowed":false`, `"retry_after_ms":`}},
	{name: "reserve descriptors held until the slot", method: "POST", path: "/v1/reservations", body: loginWait("r", 1, 3600000, `, "hold": true`), status: 200,
		want: []string{`"allowed":true`, `"wait_ms":0`, `"waited_ms":120000`, `"id":"r2.`}},
	{name: "reserve descriptors of a window", method: "POST", path: "/v1/reservations", body: `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "w"}]}], "max_wait_ms": 1000}`, status: 400,
		want: []string{`"field":"max_wait_ms"`, `rule api|user`, `only gcra`}},
	{name: "reserve descriptors of two limits", method: "POST", path: "/v1/reservations", body: `{"domain": "api", "descriptors": [{"entries": [{"key": "account", "value": "a"}]}], "max_wait_ms": 1000}`, status: 400,
		want: []string{`"field":"max_wait_ms"`, `descriptors[0] has 2 limits`}},
	{name: "reserve hold without max_wait_ms", method: "POST", path: "/v1/reservations", body: `{"key": "h", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "hold": true}`, status: 400,
		want: []string{`"field":"hold"`}},
	{name: "reserve wait store down", fixture: "down", method: "POST", path: "/v1/reservations", body: waitBody, status: 503,
		want: []string{`"status":503`, `store failed`}, header: map[string]string{"Retry-After": "1", "Content-Type": "application/problem+json"}},
	{name: "reserve hold full", fixture: "no holds", method: "POST", path: "/v1/reservations", body: strings.Replace(waitBody, `}, "max`, `}, "hold": true, "max`, 1), status: 503,
		want: []string{`"field":"max_wait_ms"`, `-max-held`}, header: map[string]string{"Retry-After": "1"}},
	{name: "reserve not held when full", fixture: "no holds", method: "POST", path: "/v1/reservations", body: waitBody, status: 200,
		want: []string{`"allowed":true`, `"wait_ms":0`}},
	{name: "allow wait now", method: "POST", path: "/v1/allow", body: allowWaitBody, status: 200,
		want: []string{`"allowed":true`, `"waited_ms":0`}, header: map[string]string{"RateLimit-Policy": `"wa";q=1;w=1800`}},
	{name: "allow held until the slot", method: "POST", path: "/v1/allow", body: allowWaitBody, status: 200,
		want: []string{`"allowed":true`, `"waited_ms":1800000`}},
	{name: "allow no slot within max_wait_ms", method: "POST", path: "/v1/allow", body: strings.Replace(allowWaitBody, `3600000`, `1000`, 1), status: 200,
		want: []string{`"allowed":false`, `"retry_after_ms":3600000`}, header: map[string]string{"Retry-After": "3600"}},
	{name: "allow wait descriptors", method: "POST", path: "/v1/allow", body: loginWait("a", 1, 60000, ""), status: 200,
		want: []string{`"allowed":true`, `"waited_ms":0`, `"rule":"api|login"`}},
	{name: "allow wait nothing held", method: "POST", path: "/v1/allow", body: `{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/health"}]}], "max_wait_ms": 1000}`, status: 200,
		want: []string{`"allowed":true`, `"unlimited":true`}},
	{name: "allow wait unknown domain", method: "POST", path: "/v1/allow", body: `{"domain": "apj", "descriptors": [{"entries": [{"key": "login", "value": "x"}]}], "max_wait_ms": 1000}`, status: 200,
		want: []string{`"allowed":true`, `"unknown_domain":true`, `"no_rule":true`}},
	{name: "allow wait with a class", method: "POST", path: "/v1/allow", body: strings.Replace(allowWaitBody, `}, "max`, `}, "priority": "critical", "max`, 1), status: 400,
		want: []string{`"field":"priority"`}},
	{name: "allow bad max_wait_ms", method: "POST", path: "/v1/allow", body: strings.Replace(allowWaitBody, `3600000`, `3600001`, 1), invalid: true, status: 400,
		want: []string{`"field":"max_wait_ms"`}},
	{name: "allow wait store down", fixture: "down", method: "POST", path: "/v1/allow", body: allowWaitBody, status: 503,
		want: []string{`"status":503`, `store failed`}, header: map[string]string{"Retry-After": "1", "Content-Type": "application/problem+json"}},
	{name: "allow hold full", fixture: "no holds", method: "POST", path: "/v1/allow", body: allowWaitBody, status: 503,
		want: []string{`"field":"max_wait_ms"`, `-max-held`}, header: map[string]string{"Retry-After": "1"}},
	{name: "lease with max_wait_ms", method: "POST", path: "/v1/leases", body: `{"key": "l", "limit": {"algorithm": "concurrency", "limit": 1, "period": "1m"}, "max_wait_ms": 1000}`, status: 400,
		want: []string{`"field":"max_wait_ms"`}},
	{name: "commit", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{"cost": 25}`, status: 200,
		want: []string{`"refunded":15`, `"remaining":75`}},
	{name: "commit retried", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{"cost": 25}`, status: 200,
		want: []string{`"replayed":true`, `"refunded":15`, `"remaining":75`}},
	{name: "commit other cost", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{"cost": 26}`, status: 422,
		want: []string{"cost 25"}},
	{name: "cancel after commit", method: "POST", path: "/v1/reservations/" + reservationID + "/cancel", status: 422,
		want: []string{"committed"}},
	{name: "commit without cost", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{}`, invalid: true, status: 400,
		want: []string{`"field":"cost"`}},
	{name: "commit too large", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: big(`{"cost": 1, "x": "`, `"}`), invalid: true, status: 413,
		want: []string{`"field":"body"`}},
	{name: "reserve to cancel", method: "POST", path: "/v1/reservations", body: reserveBody, reqHeader: idemKey2, status: 200,
		want: []string{`"id":"` + reservationID2 + `"`, `"remaining":35`}},
	{name: "cancel", method: "POST", path: "/v1/reservations/" + reservationID2 + "/cancel", status: 200,
		want: []string{`"refunded":40`, `"remaining":75`}},
	{name: "commit unsigned id of an earlier version", method: "POST", path: "/v1/reservations/r1.bm90aGluZw/commit", body: `{"cost": 1}`, status: 404,
		want: []string{`"field":"id"`}},
	{name: "commit altered id", method: "POST", path: "/v1/reservations/" + forgedID + "/commit", body: `{"cost": 1}`, status: 404,
		want: []string{`"field":"id"`}},
	{name: "cancel unknown", method: "POST", path: "/v1/reservations/nothing/cancel", status: 404,
		want: []string{`"field":"id"`}},

	{name: "allow no rule", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "nothing", "value": "here"}]}`), status: 200,
		want: []string{`"allowed":true`, `"no_rule":true`}},
	{name: "allow unknown domain", method: "POST", path: "/v1/allow", body: `{"domain": "apj", "descriptors": [{"entries": [{"key": "user", "value": "1"}]}]}`, status: 200,
		want: []string{`"allowed":true`, `"unknown_domain":true`, `"no_rule":true`}},

	// POST /v1/leases and the steps after it.
	{name: "lease inline", method: "POST", path: "/v1/leases", body: `{"key": "worker:exports", "limit": {"algorithm": "concurrency", "limit": 4, "period": "30s"}}`, status: 200,
		want: []string{`"allowed":true`, `"remaining":3`, `"id":"l2.`}},
	{name: "lease descriptors", method: "POST", path: "/v1/leases", body: descriptors(`{"entries": [{"key": "job", "value": "export"}]}`), status: 200,
		want: []string{`"allowed":true`, `"rule":"api|job"`, `"id":"l2.`}},
	{name: "lease of a rate rule", method: "POST", path: "/v1/leases", body: descriptors(user("1")), status: 400,
		want: []string{"not a concurrency limit"}},
	{name: "lease too large", method: "POST", path: "/v1/leases", body: big(`{"key": "`, `", "limit": {"limit": 1, "period": "1s"}}`), status: 413,
		want: []string{`"field":"body"`}},
	{name: "allow of a concurrency rule", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "job", "value": "export"}]}`), status: 400,
		want: []string{"POST /v1/leases"}},
	{name: "renew", method: "POST", path: "/v1/leases/" + leaseID + "/renew", status: 200,
		want: []string{`"allowed":true`, `"id":"` + leaseID + `"`}},
	{name: "renew unknown", method: "POST", path: "/v1/leases/nothing/renew", status: 404,
		want: []string{`"field":"id"`}},
	{name: "release", method: "POST", path: "/v1/leases/" + leaseID + "/release", status: 204},
	{name: "release unknown", method: "POST", path: "/v1/leases/l1.bm90/release", status: 404,
		want: []string{`"field":"id"`}},

	// POST /v1/reset, bad input.
	{name: "reset without limit", method: "POST", path: "/v1/reset", body: `{"key": "k"}`, invalid: true, status: 400,
		want: []string{`"field":"limit"`}},
	{name: "reset unknown field", method: "POST", path: "/v1/reset", body: `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "cost": 1}`, invalid: true, status: 400,
		want: []string{`"field":"cost"`}},
	{name: "reset too large", method: "POST", path: "/v1/reset", body: big(`{"key": "`, `", "limit": {"limit": 1, "period": "1s"}}`), status: 413,
		want: []string{`"field":"body"`}},

	// The GET routes.
	{name: "config", method: "GET", path: "/v1/config", status: 200,
		want: []string{`"id":"api|user"`, `"unlimited":true`, `"shadow_mode":true`, `"replaces":["free"]`, `"failure_mode":"fail_closed"`, `"file":"api.yaml"`, `"priority":"sheddable"`,
			`"priority_reserves":{"normal":"1","sheddable":"40%"}`, `"priority_max":"normal"`, `"priority_key":"class"`}},
	{name: "metrics", method: "GET", path: "/metrics", status: 200,
		want: []string{"floodgate_config_rules 11"}},
	{name: "metrics protobuf", method: "GET", path: "/metrics", accept: "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", status: 200,
		want: []string{"floodgate_config_rules"}},
	{name: "healthz", method: "GET", path: "/healthz", status: 200, want: []string{"ok\n"}},
	{name: "readyz", method: "GET", path: "/readyz", status: 200, want: []string{"ok\n"}},
	{name: "openapi.yaml", method: "GET", path: "/openapi.yaml", status: 200, want: []string{"openapi: 3.0.3"}},

	// POST /json.
	{name: "json", method: "POST", path: "/json", body: descriptors(user("j")), status: 200,
		want:   []string{`"overallCode":"OK"`, `"currentLimit":{"name":"per_user","requestsPerUnit":2,"unit":"MINUTE"}`, `"limitRemaining":1`, `"durationUntilReset":"60s"`, `"responseHeadersToAdd"`},
		header: map[string]string{"RateLimit-Policy": `"per_user";q=2;w=60`, "Cache-Control": "no-store"}},
	{name: "json proto names", method: "POST", path: "/json", body: `{"domain": "api", "hits_addend": "1", "descriptors": [{"entries": [{"key": "user", "value": "j"}], "hits_addend": "0"}]}`, status: 200,
		want: []string{`"limitRemaining":1`}},
	{name: "json unlimited", method: "POST", path: "/json", body: descriptors(`{"entries": [{"key": "path", "value": "/health"}]}`), status: 200,
		want: []string{`"limitRemaining":4294967295`}},
	{name: "json override", method: "POST", path: "/json", body: descriptors(`{"entries": [{"key": "k", "value": "v"}], "limit": {"requestsPerUnit": 3, "unit": "HOUR", "unitMultiplier": 2}}`), status: 200,
		want: []string{`"requestsPerUnit":3`, `"limitRemaining":2`}},
	{name: "json last", method: "POST", path: "/json", body: strings.Replace(descriptors(user("j")), `{"domain"`, `{"hitsAddend": 1, "domain"`, 1), status: 200,
		want: []string{`"overallCode":"OK"`}},
	{name: "json denied", method: "POST", path: "/json", body: descriptors(user("j")), status: 429,
		want: []string{`"overallCode":"OVER_LIMIT"`, `"code":"OVER_LIMIT"`}, header: map[string]string{"Retry-After": "60"}},
	{name: "json unknown field", method: "POST", path: "/json", body: `{"domain": "api", "descriptorz": []}`, invalid: true, status: 400,
		want: []string{`"field":"descriptorz"`}},
	{name: "json negative hits", method: "POST", path: "/json", body: `{"domain": "api", "hitsAddend": -1, "descriptors": [{"entries": [{"key": "a"}]}]}`, invalid: true, status: 400},
	{name: "json unknown unit", method: "POST", path: "/json", body: descriptors(`{"entries": [{"key": "a"}], "limit": {"requestsPerUnit": 1, "unit": "UNKNOWN"}}`), invalid: true, status: 400,
		want: []string{`"field":"descriptors[0].limit.unit"`}},
	{name: "json negative hits flag", method: "POST", path: "/json", body: descriptors(`{"entries": [{"key": "a"}], "isNegativeHits": true}`), invalid: true, status: 400,
		want: []string{`"field":"descriptors[0].is_negative_hits"`}},
	{name: "json no descriptors", method: "POST", path: "/json", body: `{"domain": "api"}`, invalid: true, status: 400,
		want: []string{`"field":"descriptors"`}},
	{name: "json too large", method: "POST", path: "/json", body: big(`{"domain": "`, `", "descriptors": [{"entries": [{"key": "a"}]}]}`), status: 413,
		want: []string{`"field":"body"`}},

	// A store that fails: the failure modes.
	{name: "fail_closed", fixture: "down", method: "POST", path: "/v1/allow", body: descriptors(`{"entries": [{"key": "payment", "value": "card"}]}`), status: 503,
		want:   []string{`"allowed":false`, `"code":"OVER_LIMIT"`, `"store_error":true`},
		header: map[string]string{"Retry-After": "1", "Cache-Control": "no-store", "RateLimit": ""}},
	{name: "fail_open", fixture: "down", method: "POST", path: "/v1/allow", body: descriptors(user("1")), status: 200,
		want: []string{`"allowed":true`, `"store_error":true`}, header: map[string]string{"RateLimit-Policy": ""}},
	{name: "inline fail_open", fixture: "down", method: "POST", path: "/v1/allow", body: inlineLimit, status: 200,
		want: []string{`"allowed":true`, `"store_error":true`}},
	{name: "reset store down", fixture: "down", method: "POST", path: "/v1/reset", body: inlineLimit, status: 503,
		want: []string{`"status":503`, "connection refused"}},
	{name: "readyz store down", fixture: "down", method: "GET", path: "/readyz", status: 503,
		want: []string{"not ready: store unreachable"}},
	{name: "json fail_closed", fixture: "down", method: "POST", path: "/json", body: descriptors(`{"entries": [{"key": "payment", "value": "card"}]}`), status: 429,
		want: []string{`"overallCode":"OVER_LIMIT"`}, header: map[string]string{"Retry-After": "1"}},
	{name: "json fail_open", fixture: "down", method: "POST", path: "/json", body: descriptors(user("1")), status: 200,
		want: []string{`"statuses":[{"code":"OK"}]`}},
	{name: "local", fixture: "local", method: "POST", path: "/v1/allow", body: descriptors(user("1")), status: 200,
		want:   []string{`"allowed":true`, `"fallback":true`, `"limit":1`},
		header: map[string]string{"RateLimit-Policy": `"per_user";q=1;w=60`}},
	{name: "readyz local", fixture: "local", method: "GET", path: "/readyz", status: 200,
		want: []string{"ok: failure mode local decides in memory, store unreachable"}},
	{name: "reserve not supported", fixture: "no reset", method: "POST", path: "/v1/reservations", body: reserveBody, status: 501,
		want: []string{`"status":501`}},
	{name: "reserve store down", fixture: "down", method: "POST", path: "/v1/reservations", body: reserveBody, status: 200,
		want: []string{`"allowed":true`, `"store_error":true`}},
	{name: "reserve fail_closed", fixture: "down", method: "POST", path: "/v1/reservations", body: descriptors(`{"entries": [{"key": "payment", "value": "card"}]}`), status: 503,
		want: []string{`"allowed":false`, `"store_error":true`}},
	{name: "commit store down", fixture: "down", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{"cost": 1}`, status: 503,
		want: []string{"store failed"}},
	{name: "cancel store down", fixture: "down", method: "POST", path: "/v1/reservations/" + reservationID + "/cancel", status: 503,
		want: []string{"store failed"}},
	{name: "reserve to expire", fixture: "hourly", method: "POST", path: "/v1/reservations", body: reserveBody, reqHeader: idemKey, status: 200,
		want: []string{`"id":"r2.`}},
	{name: "commit expired", fixture: "hourly", method: "POST", path: "/v1/reservations/" + reservationID + "/commit", body: `{"cost": 1}`, status: 410,
		want: []string{"stayed charged"}},
	{name: "cancel expired", fixture: "hourly", method: "POST", path: "/v1/reservations/" + reservationID + "/cancel", status: 410,
		want: []string{"stayed charged"}},
	{name: "lease fail_closed", fixture: "down", method: "POST", path: "/v1/leases", body: descriptors(`{"entries": [{"key": "job", "value": "export"}]}`), status: 503,
		want: []string{`"allowed":false`, `"store_error":true`}},
	{name: "release store down", fixture: "down", method: "POST", path: "/v1/leases/" + leaseID + "/release", status: 503,
		want: []string{"store failed"}},
	{name: "reset not supported", fixture: "no reset", method: "POST", path: "/v1/reset", body: inlineLimit, status: 501,
		want: []string{`"status":501`, "not supported"}},
}

// TestOpenAPI holds openapi.yaml and the handler to each other: the
// document must be valid; each exchange must pass the document's request
// validation (or fail it, when the server rejects the request too) and its
// response must be one the document lists for the operation, with its
// content type, headers and body; every route the handler serves must be
// in the document; and every operation, status and content type the
// document lists must have been seen. A route, a status or a field added on
// one side only fails here.
func TestOpenAPI(t *testing.T) {
	ctx := t.Context()
	// The dashboard's bodies are text, which the validator reads as such.
	for _, mt := range []string{"text/html", "text/javascript", "text/css", "image/svg+xml", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(mt, openapi3filter.PlainBodyDecoder)
	}
	srv, extra := openAPIServer(t, nil)
	handlers := map[string]http.Handler{"": srv.Handler(extra)}
	for name, setup := range map[string]func(*fixture, func() floodgate.Store){
		"down": func(o *fixture, _ func() floodgate.Store) { o.Store = brokenStore{} },
		"local": func(o *fixture, mem func() floodgate.Store) {
			o.Store = brokenStore{}
			o.Limiter = floodgate.Options{FailurePolicy: floodgate.FailLocal, Instances: 2, Local: mem()}
		},
		"no reset": func(o *fixture, mem func() floodgate.Store) { o.Store = applyOnly{mem()} },
		"no holds": func(o *fixture, _ func() floodgate.Store) { o.MaxHeld = -1 },
		"hourly":   func(o *fixture, _ func() floodgate.Store) { o.Limiter.Clock = &hourly{now: start} },
		"auth":     func(o *fixture, _ func() floodgate.Store) { o.Auth = tokenAuth(t) },
		"ledger":   func(o *fixture, _ func() floodgate.Store) { o.Ledger = true },
		"ledger down": func(o *fixture, _ func() floodgate.Store) {
			o.Ledger, o.LedgerDown = true, true
		},
	} {
		s, x := openAPIServer(t, setup)
		handlers[name] = s.Handler(x)
	}

	// The document the server serves, as clients get it.
	rec := httptest.NewRecorder()
	handlers[""].ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.yaml", nil))
	if got := rec.Header().Get("Content-Type"); got != "application/yaml" {
		t.Fatalf("GET /openapi.yaml: Content-Type %q", got)
	}
	doc, err := openapi3.NewLoader().LoadFromData(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi: %s, want 3.0.3", doc.OpenAPI)
	}
	closeResponseSchemas(doc)

	// Every route the handler serves is in the document, and every
	// operation of the document is a route.
	patterns := srv.Patterns(extra)
	for i, p := range patterns {
		// "/{$}" is ServeMux's "/ and nothing after": OpenAPI's "/".
		patterns[i] = strings.TrimSuffix(p, "{$}")
	}
	ops := operations(doc)
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			t.Errorf("route %q: the test knows only METHOD /path patterns", p)
			continue
		}
		if !slices.Contains(ops, method+" "+path) {
			t.Errorf("the handler serves %s, which openapi.yaml lacks", p)
		}
	}
	for _, op := range ops {
		if !slices.Contains(patterns, op) {
			t.Errorf("openapi.yaml describes %s, which the handler does not serve", op)
		}
	}

	seen := map[string]bool{}
	for _, ex := range append(slices.Clip(exchanges), overrideExchanges...) {
		t.Run(ex.name, func(t *testing.T) {
			h, ok := handlers[ex.fixture]
			if !ok {
				t.Fatalf("no fixture %q", ex.fixture)
			}
			if key, ok := checkExchange(t, doc, h, ex); ok {
				seen[key] = true
			}
		})
	}
	for _, key := range responseKeys(doc) {
		if !seen[key] {
			t.Errorf("no exchange answered %s, which openapi.yaml lists", key)
		}
	}
}

// checkExchange makes ex's request on h and validates both sides against
// doc; it returns "METHOD path status media-type" and whether all went
// well.
func checkExchange(t *testing.T, doc *openapi3.T, h http.Handler, ex exchange) (string, bool) {
	t.Helper()
	newRequest := func() *http.Request {
		var body io.Reader
		if ex.body != "" {
			body = strings.NewReader(ex.body)
		}
		r := httptest.NewRequest(ex.method, ex.path, body)
		if ex.body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if ex.accept != "" {
			r.Header.Set("Accept", ex.accept)
		}
		for k, v := range ex.reqHeader {
			r.Header.Set(k, v)
		}
		return r
	}
	template, params := pathTemplate(ex.path)
	item := doc.Paths.Value(template)
	if item == nil || item.GetOperation(ex.method) == nil {
		t.Fatalf("openapi.yaml has no operation %s %s", ex.method, template)
	}
	route := &routers.Route{Spec: doc, Path: template, PathItem: item, Method: ex.method, Operation: item.GetOperation(ex.method)}
	in := &openapi3filter.RequestValidationInput{Request: newRequest(), PathParams: params, Route: route, Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	switch err := openapi3filter.ValidateRequest(t.Context(), in); {
	case ex.invalid && err == nil:
		t.Errorf("openapi.yaml accepts the request, which the server rejects")
	case !ex.invalid && err != nil:
		t.Errorf("openapi.yaml rejects the request: %v", err)
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newRequest())
	resp := rec.Result()
	body := rec.Body.Bytes()
	if resp.StatusCode != ex.status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, ex.status, truncate(body))
	}
	for _, w := range ex.want {
		// protojson varies its spaces on purpose, so /json's bodies are
		// also compared without them.
		if !bytes.Contains(body, []byte(w)) && !strings.Contains(noSpace(string(body)), noSpace(w)) {
			t.Errorf("body lacks %q: %s", w, truncate(body))
		}
	}
	for name, want := range ex.header {
		if got := resp.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}

	ok := !t.Failed()
	rin := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	rin.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(t.Context(), rin); err != nil {
		t.Errorf("the response does not match openapi.yaml: %v\nbody: %s", err, truncate(body))
		ok = false
	}
	// ValidateResponse checks the headers the document declares; these are
	// the ones the server sends that it must declare.
	spec := route.Operation.Responses.Status(resp.StatusCode)
	if spec == nil {
		return "", false
	}
	for _, name := range []string{"Cache-Control", "RateLimit", "RateLimit-Policy", "Retry-After"} {
		if resp.Header.Get(name) != "" && spec.Value.Headers[name] == nil {
			t.Errorf("the response has %s, which openapi.yaml does not declare for %d", name, resp.StatusCode)
			ok = false
		}
	}
	mediaType := ""
	if len(spec.Value.Content) == 0 {
		if len(body) > 0 || resp.Header.Get("Content-Type") != "" {
			t.Errorf("openapi.yaml says %d has no content; the server sent %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), truncate(body))
			ok = false
		}
	} else if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil {
		t.Errorf("Content-Type %q: %v", resp.Header.Get("Content-Type"), err)
		ok = false
	} else {
		mediaType = mt
	}
	return fmt.Sprintf("%s %s %d %s", ex.method, template, resp.StatusCode, mediaType), ok
}

// pathTemplate is the document's path of a request path, and its
// parameters: /v1/reservations/ID/commit is /v1/reservations/{id}/commit.
func pathTemplate(path string) (string, map[string]string) {
	path, _, _ = strings.Cut(path, "?")
	if asset, ok := strings.CutPrefix(path, "/ui/"); ok && asset != "events" && asset != "" {
		return "/ui/{asset}", map[string]string{"asset": asset}
	}
	for _, prefix := range []string{"/v1/reservations/", "/v1/leases/"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			id, op, _ := strings.Cut(rest, "/")
			return prefix + "{id}/" + op, map[string]string{"id": id}
		}
	}
	return path, nil
}

// operations lists the document's operations as "METHOD /path".
func operations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// responseKeys lists every response of the document, one per media type,
// as checkExchange names them.
func responseKeys(doc *openapi3.T) []string {
	var keys []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, r := range op.Responses.Map() {
				if len(r.Value.Content) == 0 {
					keys = append(keys, fmt.Sprintf("%s %s %s ", method, path, status))
				}
				for mt := range r.Value.Content {
					keys = append(keys, fmt.Sprintf("%s %s %s %s", method, path, status, mt))
				}
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// closeResponseSchemas sets additionalProperties: false on every object
// schema with properties that a response uses. The published document
// leaves answers open, so that a field added later does not break a
// generated client; the test closes them, so that a field the server sends
// and the document does not name fails. (Request bodies are closed in the
// document itself, as the server rejects unknown fields.)
func closeResponseSchemas(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Type.Is("object") && len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = openapi3.Ptr(false)
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		for _, refs := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
			for _, r := range refs {
				walk(r)
			}
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				for _, mt := range r.Value.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}

func noSpace(s string) string { return strings.ReplaceAll(s, " ", "") }

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
