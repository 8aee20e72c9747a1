package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server/httpapi"
)

// FuzzAllow sends any body to POST /v1/allow: the answer is never a panic or
// a 5xx (the memory store cannot fail), and always JSON: a decision, or a
// problem naming what is wrong.
func FuzzAllow(f *testing.F) {
	for _, seed := range []string{
		`{"key": "user:42", "limit": {"algorithm": "fixed_window", "limit": 60, "period": "1m"}, "cost": 1}`,
		`{"key": "k", "limit": {"algorithm": "gcra", "limit": 10, "period": "1s", "burst": 20}, "cost": 0}`,
		`{"key": "k", "limit": {"algorithm": "sliding_window_log", "limit": 1, "period": "1h", "window": "first_hit"}}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "42"}]}], "hits": 1}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "plan", "value": "free"}]}, {"entries": [{"key": "plan", "value": "trial"}]}]}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "x", "value": "y"}], "hits": 0, "limit": {"limit": 5, "period": "1m"}}]}`,
		`{"key": "k", "limit": {"limit": 9223372036854775807, "period": "2562047h"}}`,
		`{"key": "", "limit": null}`, `[]`, `null`, `{"key": 1}`, `{`,
		`{"key": "t", "limit": {"limit": 1000, "unit": "month", "time_zone": "America/New_York", "anchor": "15"}}`,
		`{"key": "t", "limit": {"limit": 1, "unit": "week", "anchor": "sunday"}}`,
		`{"key": "t", "limit": {"limit": 1, "unit": "year", "time_zone": "../../etc/passwd", "anchor": "02-29"}}`,
		`{"key": "t", "limit": {"limit": 1, "unit": "day", "period": "1h", "anchor": "x"}}`,
		`{"key": "p", "limit": {"algorithm": "gcra", "limit": 5, "period": "1m"}, "priority": "sheddable"}`,
		`{"key": "p", "limit": {"algorithm": "token_bucket", "limit": 1, "period": "1s"}, "priority": "normal"}`,
		`{"domain": "api", "priority": "critical", "descriptors": [{"entries": [{"key": "user", "value": "42"}]}]}`,
		`{"domain": "api", "priority": "Sheddable\u0000", "descriptors": [{"entries": [{"key": "x"}], "limit": {"limit": 1, "period": "1s", "count_rejected": true}}]}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1µs", "burst": 1}, "cost": 1, "max_wait_ms": 3600000}`,
		`{"key": "w", "limit": {"algorithm": "token_bucket", "limit": 1, "period": "1s"}, "max_wait_ms": 0}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": -1, "priority": "critical"}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 1e3}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}], "max_wait_ms": 2000}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}], "hits": 2}], "max_wait_ms": 2000}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "1"}]}, {"entries": [{"key": "path", "value": "/login"}]}], "max_wait_ms": 9223372036854775807}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "t"}]}, {"entries": [{"key": "path", "value": "/health"}]}], "max_wait_ms": 100}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "x", "value": "y"}], "limit": {"algorithm": "gcra", "limit": 2, "period": "1m", "burst": 1}}], "max_wait_ms": 60000}`,
	} {
		f.Add(seed)
	}
	h := apiHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/allow", strings.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("non-JSON answer %q for %q", rec.Body, body)
		}
		if rec.Code == http.StatusBadRequest && !strings.Contains(rec.Body.String(), `"field"`) {
			t.Fatalf("a 400 that names no field: %s", rec.Body)
		}
	})
}

// FuzzReserve sends any body to POST /v1/reservations, waits and holds
// among them: the answer is never a panic or a 5xx (the memory store
// cannot fail, and holds are far from full), and always JSON: a
// reservation, or a problem naming what is wrong.
func FuzzReserve(f *testing.F) {
	for _, seed := range []string{
		`{"key": "llm:acme", "limit": {"limit": 100, "period": "1h"}, "cost": 40, "ttl_ms": 60000}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000, "hold": true}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "max_wait_ms": 5000, "ttl_ms": 1}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "hold": true}`,
		`{"key": "w", "limit": {"algorithm": "gcra", "limit": 1, "period": "1s"}, "hold": "yes", "max_wait_ms": 1}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}], "max_wait_ms": 2000, "release_on_expiry": true}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}], "max_wait_ms": 2000, "hold": true}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "plan", "value": "free"}]}, {"entries": [{"key": "user", "value": "u"}]}], "max_wait_ms": 3600000}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}], "hits": 0, "max_wait_ms": 0}`,
		`{"domain": "api", "descriptors": [], "max_wait_ms": 1}`, `{"max_wait_ms": 1}`, `{"hold": false}`,
	} {
		f.Add(seed)
	}
	h := apiHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/reservations", strings.NewReader(body)))
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("non-JSON answer %q for %q", rec.Body, body)
		}
		if rec.Code == http.StatusBadRequest && !strings.Contains(rec.Body.String(), `"field"`) {
			t.Fatalf("a 400 that names no field: %s", rec.Body)
		}
	})
}

// FuzzReset sends any body to POST /v1/reset: the answer is never a panic or
// a 5xx; it is 204 with no body, or a JSON problem naming the field. After a
// 204 the key is empty under that limit: a peek of it through /v1/allow is
// admitted with all of the limit remaining (concurrency aside, which
// /v1/allow does not take).
func FuzzReset(f *testing.F) {
	for _, seed := range []string{
		`{"key": "user:42", "limit": {"algorithm": "fixed_window", "limit": 60, "period": "1m"}}`,
		`{"key": "k", "limit": {"algorithm": "gcra", "limit": 10, "period": "1s", "burst": 20}}`,
		`{"key": "k", "limit": {"algorithm": "concurrency", "limit": 3, "period": "30s"}}`,
		`{"key": "{evil}", "limit": {"algorithm": "sliding_window", "limit": 0, "period": "1h"}}`,
		`{"key": "k", "limit": {"limit": 1, "period": "1µs", "window": "first_hit", "count_rejected": true}}`,
		`{"key": "k", "limit": {"limit": -1, "period": "0s"}}`,
		`{"key": "", "limit": {"limit": 1, "period": "1s"}}`,
		`{"key": "k"}`, `{"key": "k", "limit": null}`, `{"key": "k", "limit": {}, "extra": 1}`,
		`[]`, `null`, `{`, `{"key": "k", "limit": {"limit": 1, "period": "1s"}} {}`,
	} {
		f.Add(seed)
	}
	h := apiHandler(f)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/reset", strings.NewReader(body)))
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		case rec.Code == http.StatusNoContent:
			if rec.Body.Len() != 0 {
				t.Fatalf("204 with a body %q", rec.Body)
			}
		default:
			if !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("status %d with a non-JSON answer %q for %q", rec.Code, rec.Body, body)
			}
			if rec.Code == http.StatusBadRequest && !strings.Contains(rec.Body.String(), `"field"`) {
				t.Fatalf("a 400 that names no field: %s", rec.Body)
			}
			return
		}
		var req httpapi.ResetRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatalf("204 for a body that is not a ResetRequest: %v", err)
		}
		if req.Domain != "" || req.Entries != nil {
			return // a descriptor's key: /v1/allow peeks at it only through its rule.
		}
		if req.Limit.Algorithm == string(floodgate.Concurrency) {
			return // /v1/allow takes no lease, so it cannot peek at one.
		}
		peek, err := json.Marshal(httpapi.AllowRequest{Key: req.Key, Limit: req.Limit, Cost: new(int64)})
		if err != nil {
			t.Fatal(err)
		}
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/allow", bytes.NewReader(peek)))
		var got httpapi.AllowResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil {
			t.Fatalf("peek after a reset: status %d, %v: %s", rec.Code, err, rec.Body)
		}
		if !got.Allowed || got.Remaining != got.Limit {
			t.Fatalf("peek after a reset of %s: %+v, want allowed with all of the limit remaining", body, got.DecisionJSON)
		}
	})
}

// FuzzIDs sends any id, and any body, to the steps of reservations and
// leases (commit, cancel, renew, release): an id is a token the server
// reads, so a forged or broken one must be answered 404 (or, for a
// well-formed one, what the store says), never a panic or a 5xx (the
// memory store cannot fail).
func FuzzIDs(f *testing.F) {
	limit := floodgate.Limit{Limit: 10, Period: 3600e9}
	for _, seed := range []struct{ path, id, body string }{
		{"/v1/reservations/%s/commit", httpapi.ReservationToken("k1", "llm:acme", limit, 1, start.Add(time.Minute)), `{"cost": 1}`},
		{"/v1/reservations/%s/cancel", httpapi.ReservationToken("k2", "x", limit, 1, start.Add(time.Minute)), ``},
		{"/v1/leases/%s/renew", httpapi.LeaseToken("abc", "w", floodgate.Limit{Algorithm: floodgate.Concurrency, Limit: 2, Period: 30e9}, 1), ``},
		{"/v1/leases/%s/release", "l1.e30", ``},
		{"/v1/reservations/%s/commit", "r1.eyJpIjoiYSIsImsiOlt7ImsiOiJ4IiwibCI6eyJsaW1pdCI6LTF9fV19", `{"cost": -1}`},
		{"/v1/leases/%s/renew", "nothing", ``},
	} {
		f.Add(seed.path, seed.id, seed.body)
	}
	h := apiHandler(f)
	f.Fuzz(func(t *testing.T, path, id, body string) {
		if strings.Count(path, "%s") != 1 || strings.Contains(id, "/") || id == "" {
			return
		}
		// Any path the mux may see, whatever its bytes: set after the
		// request is made, as a server would have decoded it.
		target := strings.Replace(path, "%s", id, 1)
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.URL.Path, req.URL.RawPath = target, ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %s %q: %s", rec.Code, target, body, rec.Body)
		}
		if rec.Body.Len() > 0 && !json.Valid(rec.Body.Bytes()) && rec.Code != http.StatusNotFound && rec.Code != http.StatusMethodNotAllowed {
			t.Fatalf("non-JSON answer %q for %s", rec.Body, target)
		}
	})
}
