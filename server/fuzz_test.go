package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
	} {
		f.Add(seed)
	}
	srv, _ := newServer(f, nil, apiYAML)
	h := srv.Handler(nil)
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
