package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/pgtest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/postgres"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// overrideSync is the OverrideSync of srv over a new SQLite ledger when
// on, loaded; closed when down, so that its every call fails; nil when
// not on.
func overrideSync(t *testing.T, srv *server.Server, on, down bool) *server.OverrideSync {
	t.Helper()
	if !on {
		return nil
	}
	l, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	sync, err := server.NewOverrideSync(srv, l, &server.OverrideSyncOptions{Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sync.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if down {
		l.Close()
	}
	return sync
}

const (
	acmeKey    = `{"domain": "api", "entries": [{"key": "account", "value": "acme"}]}`
	acmePro    = `{"domain": "api", "entries": [{"key": "account", "value": "acme"}], "plan": "pro"}`
	acmeAllow  = `{"domain": "api", "descriptors": [{"entries": [{"key": "account", "value": "acme"}]}]}`
	acmeLimits = `{"domain": "api", "entries": [{"key": "account", "value": "acme"}], "limits": [{"limit": 3, "period": "1s"}, {"limit": 50, "period": "24h"}]}`
)

// overrideExchanges are the OpenAPI test's exchanges of several limits
// and of the override routes, run after the others, in order.
var overrideExchanges = []exchange{
	// A descriptor of several limits reports each, the most restrictive
	// in its own fields and in the RateLimit fields.
	{name: "several limits", method: "POST", path: "/v1/allow", body: acmeAllow, status: 200,
		want:   []string{`"limit":2,"remaining":1`, `"limits":[{"allowed":true,"code":"OK","limit":2,"remaining":1,`, `{"allowed":true,"code":"OK","limit":100,"remaining":99,`, `"name":"account_day"`},
		header: map[string]string{"RateLimit-Policy": `"account_second";q=2;w=1`}},
	{name: "config of several limits", method: "GET", path: "/v1/config", status: 200,
		want: []string{`"id":"api|account","domain":"api","limit":{"algorithm":"fixed_window","limit":2,"period":"1s","name":"account_second"},"limits":[`}},

	// The routes of overrides.
	{name: "overrides without a ledger", method: "GET", path: "/v1/overrides", status: 501, want: []string{"-ledger"}},
	{name: "set override without a ledger", method: "POST", path: "/v1/overrides", body: acmePro, status: 501},
	{name: "remove override without a ledger", method: "POST", path: "/v1/overrides/remove", body: acmeKey, status: 501},
	{name: "audit without a ledger", method: "GET", path: "/v1/overrides/audit", status: 501},
	{name: "overrides without token", fixture: "auth", method: "GET", path: "/v1/overrides", status: 401},
	{name: "set override without token", fixture: "auth", method: "POST", path: "/v1/overrides", body: acmePro, status: 401},
	{name: "set override as client", fixture: "auth", method: "POST", path: "/v1/overrides", body: acmePro, reqHeader: asClient, status: 403},
	{name: "remove override without token", fixture: "auth", method: "POST", path: "/v1/overrides/remove", body: acmeKey, status: 401},
	{name: "audit without token", fixture: "auth", method: "GET", path: "/v1/overrides/audit", status: 401},
	{name: "overrides, none", fixture: "ledger", method: "GET", path: "/v1/overrides", status: 200, want: []string{`{"version":0,"overrides":[]}`}},
	{name: "set override to a plan", fixture: "ledger", method: "POST", path: "/v1/overrides", body: acmePro, status: 200,
		want: []string{`"version":1`, `"subject":"d|api|account=acme"`, `"new":{"domain":"api","entries":[{"key":"account","value":"acme"}],"plan":"pro"}`, `"by":"anonymous"`, `"at":"2026-11-29T12:00:00Z"`}},
	{name: "allow under the plan", fixture: "ledger", method: "POST", path: "/v1/allow", body: acmeAllow, status: 200,
		want: []string{`"override":true`, `"plan":"pro"`, `"limit":20,"remaining":19`}},
	{name: "set override to limits", fixture: "ledger", method: "POST", path: "/v1/overrides", body: acmeLimits, status: 200,
		want: []string{`"version":2`, `"old":{"domain":"api","entries":[{"key":"account","value":"acme"}],"plan":"pro"}`, `"limits":[{"algorithm":"fixed_window","limit":3,"period":"1s"}`}},
	{name: "allow under the limits", fixture: "ledger", method: "POST", path: "/v1/allow", body: acmeAllow, status: 200,
		want: []string{`"override":true`, `"limit":3,"remaining":1`}},
	{name: "overrides, one", fixture: "ledger", method: "GET", path: "/v1/overrides", status: 200, want: []string{`"version":2`, `"subject":"d|api|account=acme"`}},
	{name: "set override to an unknown plan", fixture: "ledger", method: "POST", path: "/v1/overrides", body: `{"domain": "api", "entries": [{"key": "account", "value": "acme"}], "plan": "gold"}`, status: 400,
		want: []string{`"field":"plan"`, `has no plan \"gold\" (its plans: pro)`}},
	{name: "set override of no rule", fixture: "ledger", method: "POST", path: "/v1/overrides", body: `{"domain": "api", "entries": [{"key": "nobody", "value": "x"}], "plan": "pro"}`, status: 400,
		want: []string{`"field":"entries"`}},
	{name: "set override of a bad limit", fixture: "ledger", method: "POST", path: "/v1/overrides", body: `{"domain": "api", "entries": [{"key": "account", "value": "acme"}], "limits": [{"limit": 3, "period": "soon"}]}`, invalid: true, status: 400,
		want: []string{`"field":"limits[0].period"`}},
	{name: "remove override", fixture: "ledger", method: "POST", path: "/v1/overrides/remove", body: acmeKey, status: 200,
		want: []string{`"version":3`, `"old":{`}},
	{name: "remove override again", fixture: "ledger", method: "POST", path: "/v1/overrides/remove", body: acmeKey, status: 404},
	{name: "remove override of an empty key", fixture: "ledger", method: "POST", path: "/v1/overrides/remove", body: `{"domain": "api", "entries": [{"key": "", "value": "x"}]}`, invalid: true, status: 400,
		want: []string{`"field":"entries[0].key"`}},
	{name: "audit", fixture: "ledger", method: "GET", path: "/v1/overrides/audit", status: 200,
		want: []string{`{"changes":[{"version":3,`, `{"version":2,`, `{"version":1,`}},
	{name: "audit page", fixture: "ledger", method: "GET", path: "/v1/overrides/audit?subject=d%7Capi%7Caccount%3Dacme&before=3&limit=1", status: 200,
		want: []string{`{"changes":[{"version":2,`}},
	{name: "audit bad limit", fixture: "ledger", method: "GET", path: "/v1/overrides/audit?limit=0", invalid: true, status: 400, want: []string{`"field":"limit"`}},
	{name: "overrides, ledger down", fixture: "ledger down", method: "GET", path: "/v1/overrides", status: 503, want: []string{"ledger failed"}},
	{name: "set override, ledger down", fixture: "ledger down", method: "POST", path: "/v1/overrides", body: acmePro, status: 503},
	{name: "remove override, ledger down", fixture: "ledger down", method: "POST", path: "/v1/overrides/remove", body: acmeKey, status: 503},
	{name: "audit, ledger down", fixture: "ledger down", method: "GET", path: "/v1/overrides/audit", status: 503},
}

// TestOverridesAcrossInstances: an override set through the admin API of
// one of three instances sharing a ledger is in force on the two others
// at their next poll (each instance's OverrideSync.Refresh, what
// floodgate serve runs every -override-poll), and not before; the audit
// lists it with who made it; a restart (a new instance over the ledger
// reopened) keeps it. On a real PostgreSQL the test starts, and on
// SQLite.
func TestOverridesAcrossInstances(t *testing.T) {
	for _, kind := range []string{"postgres", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			var open func() ledger.Store
			switch kind {
			case "postgres":
				url := pgtest.Start(t, nil).NewDatabase(t)
				open = func() ledger.Store {
					l, err := postgres.Open(t.Context(), url, nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { l.Close() })
					return l
				}
			default:
				path := filepath.Join(t.TempDir(), "ledger.db")
				open = func() ledger.Store {
					l, err := sqlite.Open(t.Context(), path, nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { l.Close() })
					return l
				}
			}
			clock := floodgatetest.NewFakeClock(start)
			store := memstore.New(&memstore.Options{Clock: clock})
			t.Cleanup(func() { store.Close() })
			auth := tokenAuth(t)
			type instance struct {
				srv  *server.Server
				sync *server.OverrideSync
				h    http.Handler
			}
			newInstance := func() instance {
				d, err := config.Parse("api.yaml", []byte(openAPIYAML))
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := config.New(d)
				if err != nil {
					t.Fatal(err)
				}
				srv, err := server.New(server.Options{Store: store, Config: cfg, Limiter: floodgate.Options{Clock: clock}})
				if err != nil {
					t.Fatal(err)
				}
				sync, err := server.NewOverrideSync(srv, open().(ledger.OverrideStore), &server.OverrideSyncOptions{Now: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				if err := sync.Refresh(t.Context()); err != nil {
					t.Fatal(err)
				}
				api, err := httpapi.New(srv, &httpapi.Options{Auth: auth, IDKeys: [][]byte{httpapi.TestIDKey}, Overrides: sync})
				if err != nil {
					t.Fatal(err)
				}
				return instance{srv, sync, api.Handler(nil)}
			}
			call := func(in instance, method, path, body string) (int, string) {
				t.Helper()
				var r *http.Request
				if body == "" {
					r = httptest.NewRequest(method, path, nil)
				} else {
					r = httptest.NewRequest(method, path, strings.NewReader(body))
				}
				r.Header.Set("Authorization", "Bearer "+adminToken)
				rec := httptest.NewRecorder()
				in.h.ServeHTTP(rec, r)
				return rec.Code, rec.Body.String()
			}
			limitOf := func(in instance) int64 {
				t.Helper()
				code, body := call(in, "POST", "/v1/allow", strings.Replace(acmeAllow, `"domain"`, `"hits": 0, "domain"`, 1))
				var out struct{ Descriptors []struct{ Limit int64 } }
				if code != 200 || json.Unmarshal([]byte(body), &out) != nil || len(out.Descriptors) != 1 {
					t.Fatalf("POST /v1/allow: %d %s", code, body)
				}
				return out.Descriptors[0].Limit
			}
			ins := []instance{newInstance(), newInstance(), newInstance()}
			for i, in := range ins {
				if got := limitOf(in); got != 2 {
					t.Fatalf("instance %d before: limit %d, want the rule's 2", i, got)
				}
			}
			if code, body := call(ins[0], "POST", "/v1/overrides", acmePro); code != 200 {
				t.Fatalf("POST /v1/overrides: %d %s", code, body)
			}
			if got := limitOf(ins[0]); got != 20 {
				t.Errorf("instance 0, which took the change: limit %d, want the plan's 20", got)
			}
			for i, in := range ins[1:] {
				if got := limitOf(in); got != 2 {
					t.Errorf("instance %d before its poll: limit %d, want the rule's 2", i+1, got)
				}
				if err := in.sync.Refresh(t.Context()); err != nil {
					t.Fatal(err)
				}
				if got := limitOf(in); got != 20 {
					t.Errorf("instance %d after its poll: limit %d, want the plan's 20", i+1, got)
				}
			}
			code, body := call(ins[2], "GET", "/v1/overrides/audit", "")
			identity := auth.Identity("Bearer " + adminToken)
			if code != 200 || !strings.Contains(body, `"version":1`) || !strings.Contains(body, `"by":"token:`+identity+`"`) ||
				!strings.Contains(body, `"plan":"pro"`) || !strings.Contains(body, `"at":"2026-11-29T12:00:00Z"`) {
				t.Errorf("audit from another instance: %d %s", code, body)
			}
			// A restart: a new instance over the ledger opened anew.
			if got := limitOf(newInstance()); got != 20 {
				t.Errorf("after a restart: limit %d, want the plan's 20", got)
			}
		})
	}
}
