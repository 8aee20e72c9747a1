package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

const localYAML = `
domain: api
descriptors:
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: local}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 10, failure_mode: fail_closed}
`

// unreachable is a store whose ping fails, as a Redis store's does while
// Redis is down.
type unreachable struct{ *memstore.Store }

func (unreachable) Ping(context.Context) error { return errors.New("dial tcp: connection refused") }

// TestAuthScopes: only admin tokens reach the admin routes; with only an
// admin file, decisions stay open; /readyz keeps the store's error for
// admins (it names the store's address).
func TestAuthScopes(t *testing.T) {
	const client, admin = "client-0123456789abcdef", "admin-0123456789abcdef"
	store := memstore.New(nil)
	defer store.Close()
	auth, err := transport.LoadAuth("", tokenFile(t, admin+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: unreachable{store}, Config: servertest.Config(t, "api.yaml", localYAML),
		Limiter: floodgate.Options{FailurePolicy: floodgate.FailOpen}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(srv, &httpapi.Options{Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler(nil)
	do := func(method, path, body, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	if rec := do("POST", "/v1/allow", `{"key": "k", "limit": {"limit": 2, "period": "1m"}}`, ""); rec.Code != http.StatusOK {
		t.Errorf("allow without a client file: %d %s, want 200", rec.Code, rec.Body)
	}
	if rec := do("GET", "/v1/config", "", client); rec.Code != http.StatusUnauthorized {
		t.Errorf("config with an unknown token: %d, want 401", rec.Code)
	}
	if rec := do("GET", "/v1/config", "", ""); rec.Code != http.StatusUnauthorized {
		t.Errorf("config without a token: %d, want 401", rec.Code)
	}
	if rec := do("GET", "/v1/config", "", admin); rec.Code != http.StatusOK {
		t.Errorf("config with the admin token: %d, want 200", rec.Code)
	}
	if rec := do("GET", "/readyz", "", ""); rec.Code != http.StatusServiceUnavailable || strings.Contains(rec.Body.String(), "dial tcp") {
		t.Errorf("/readyz without a token: %d %q, want 503 without the store's error", rec.Code, rec.Body)
	}
	if rec := do("GET", "/readyz", "", admin); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "dial tcp") {
		t.Errorf("/readyz with the admin token: %d %q, want 503 with the store's error", rec.Code, rec.Body)
	}
	r := httptest.NewRequest("GET", "/v1/config", nil)
	r.Header.Set("Authorization", "Basic YWRtaW46eA==")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "Bearer") {
		t.Errorf("config with Basic auth: %d %s, want 401 saying Bearer", rec.Code, rec.Body)
	}
	// A problem body is JSON for a reader, not HTML: no \u003c escapes.
	if rec := do("GET", "/v1/config", "", ""); !strings.Contains(rec.Body.String(), "Bearer <token>") {
		t.Errorf("401 body %s, want it to say Bearer <token> as written", rec.Body)
	}
}
