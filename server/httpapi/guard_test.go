package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
)

// problemOf is the status and field of an answer.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder) (int, string) {
	t.Helper()
	var p httpapi.Problem
	if rec.Code >= 400 {
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%d: not a problem body: %s", rec.Code, rec.Body)
		}
	}
	return rec.Code, p.Field
}

// TestLoneSurrogateIsBadInput: a \u escape of half a surrogate pair is
// refused as invalid UTF-8 is, 400 naming the field, since encoding/json
// reads every such escape as U+FFFD and "a\ud800" and "a\udbff" would be
// one key sharing one budget (they were: both 200, one budget). A whole
// pair, or an escaped backslash before "ud800", is text like any other.
func TestLoneSurrogateIsBadInput(t *testing.T) {
	h := apiHandler(t)
	for _, tc := range []struct {
		body, field string
	}{
		{`{"key": "a\ud800", "limit": {"limit": 5, "period": "1m"}}`, "key"},
		{`{"key": "a\uDFFF", "limit": {"limit": 5, "period": "1m"}}`, "key"},
		{`{"key": "a\ud800\u0041", "limit": {"limit": 5, "period": "1m"}}`, "key"},
		{`{"key": "a\udc00\ud800", "limit": {"limit": 5, "period": "1m"}}`, "key"},
		{`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "x"}]}, {"entries": [{"key": "user", "value": "1"}, {"key": "user", "value": "\udbff"}]}]}`, "descriptors[1].entries[1].value"},
		{`{"key": "ok", "limit": {"limit": 5, "period": "1m", "name": "n\ud800"}}`, "limit.name"},
		{`{"key": "a\ud83d\ude00", "limit": {"limit": 5, "period": "1m"}}`, ""},
		{`{"key": "a\\ud800", "limit": {"limit": 5, "period": "1m"}}`, ""},
		{`{"key": "a\u00e9\\\ud83d\ude00", "limit": {"limit": 5, "period": "1m"}}`, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/allow", strings.NewReader(tc.body)))
		code, field := problemOf(t, rec)
		if tc.field == "" {
			if code != http.StatusOK {
				t.Errorf("%s: %d %s, want 200", tc.body, code, rec.Body)
			}
			continue
		}
		if code != http.StatusBadRequest || field != tc.field || !strings.Contains(rec.Body.String(), "surrogate") {
			t.Errorf("%s: %d field %q, want 400 naming %s: %s", tc.body, code, field, tc.field, rec.Body)
		}
	}
}

// TestGuardBrowsers: without token files, under GuardBrowsers, a POST
// that is not application/json is refused (415) and changes nothing: a
// page of another site can send text/plain without asking (no CORS
// preflight), and used to reset a key so; a Host that is not an IP
// address, localhost or an allowed host is refused (421), which DNS
// rebinding cannot get past. With token files nothing of this applies.
func TestGuardBrowsers(t *testing.T) {
	srv := servertest.New(t, "api.yaml", apiYAML, server.Options{})
	api, err := httpapi.New(srv, &httpapi.Options{GuardBrowsers: true, AllowedHosts: []string{"RL.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler(nil)
	const allow = `{"key": "k", "limit": {"limit": 1, "period": "1h"}}`
	do := func(method, host, ct, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Host = host
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("POST", "127.0.0.1:8080", "application/json", "/v1/allow", allow); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"allowed":true`) {
		t.Fatalf("spend the one unit: %d %s", rec.Code, rec.Body)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		rec := do("POST", "127.0.0.1:8080", ct, "/v1/reset", allow)
		if code, field := problemOf(t, rec); code != http.StatusUnsupportedMediaType || field != "Content-Type" {
			t.Errorf("POST /v1/reset as %q: %d field %q, want 415 naming Content-Type", ct, code, field)
		}
	}
	if rec := do("POST", "localhost:8080", "application/json", "/v1/allow", allow); !strings.Contains(rec.Body.String(), `"allowed":false`) {
		t.Errorf("the refused resets reset the key: %d %s", rec.Code, rec.Body)
	}
	for host, want := range map[string]int{
		"evil.example:8080":        http.StatusMisdirectedRequest,
		"localhost.evil.example":   http.StatusMisdirectedRequest,
		"127.0.0.1.nip.io":         http.StatusMisdirectedRequest,
		"127.0.0.1:8080":           http.StatusOK,
		"[::1]:8080":               http.StatusOK,
		"10.1.2.3":                 http.StatusOK,
		"localhost":                http.StatusOK,
		"LOCALHOST.:8080":          http.StatusOK,
		"dash.localhost:8080":      http.StatusOK,
		"rl.internal:8080":         http.StatusOK,
		"rl.internal.":             http.StatusOK,
		"other.rl.internal:8080":   http.StatusMisdirectedRequest,
		"rl.internal.evil.example": http.StatusMisdirectedRequest,
	} {
		rec := do("GET", host, "", "/v1/config", "")
		if code, field := problemOf(t, rec); code != want || code != http.StatusOK && field != "Host" {
			t.Errorf("GET /v1/config, Host %q: %d field %q, want %d", host, code, field, want)
		}
	}
	if rec := do("POST", "127.0.0.1", "application/json; charset=utf-8", "/v1/reset", allow); rec.Code != http.StatusNoContent {
		t.Errorf("POST /v1/reset as application/json; charset=utf-8: %d %s", rec.Code, rec.Body)
	}

	// With token files: as before, whatever the type and the Host.
	auth, err := transport.LoadAuth("", tokenFile(t, "admin-0123456789abcdef\n"))
	if err != nil {
		t.Fatal(err)
	}
	api, err = httpapi.New(srv, &httpapi.Options{Auth: auth, GuardBrowsers: true})
	if err != nil {
		t.Fatal(err)
	}
	h = api.Handler(nil)
	req := httptest.NewRequest("POST", "/v1/reset", strings.NewReader(allow))
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Authorization", "bearer admin-0123456789abcdef")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Errorf("with token files, a text/plain reset for another Host: %d %s, want 204", rec.Code, rec.Body)
	}
}
