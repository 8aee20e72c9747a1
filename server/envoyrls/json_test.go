package envoyrls_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/server/httpapi"
)

// serveJSON starts the server's HTTP API with POST /json on an
// httptest.Server, as `floodgate serve` registers it.
func serveJSON(t testing.TB, store floodgate.Store) (*httptest.Server, *floodgatetest.FakeClock) {
	t.Helper()
	srv, clock := newServer(t, store)
	hs := httptest.NewServer(servertest.Handler(t, srv, map[string]http.Handler{"POST /json": envoyrls.JSONHandler(srv)}))
	t.Cleanup(hs.Close)
	return hs, clock
}

type httpResult struct {
	status int
	header http.Header
	body   string
}

func post(t testing.TB, hs *httptest.Server, contentType, body string) httpResult {
	t.Helper()
	resp, err := hs.Client().Post(hs.URL+"/json", contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpResult{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func decodeResponse(t testing.TB, r httpResult) *rlsv3.RateLimitResponse {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, r.body)
	}
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(r.body), &resp); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return &resp
}

func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	hs, clock := serveJSON(t, nil)
	// The body of upstream's documented example; curl --data sends it as a
	// form, which upstream accepts and so must we.
	const body = `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for i, want := range []struct {
		status   int
		status0  string
		ratelimt string
		retry    string
	}{
		{http.StatusOK, "OK 3/MINUTE per_ip r=2 t=45s", `"per_ip";r=2;t=45`, ""},
		{http.StatusOK, "OK 3/MINUTE per_ip r=1 t=45s", `"per_ip";r=1;t=45`, ""},
		{http.StatusOK, "OK 3/MINUTE per_ip r=0 t=45s", `"per_ip";r=0;t=45`, ""},
		{http.StatusTooManyRequests, "OVER_LIMIT 3/MINUTE per_ip r=0 t=45s", `"per_ip";r=0;t=45`, "45"},
	} {
		r := post(t, hs, "application/x-www-form-urlencoded", body)
		if r.status != want.status {
			t.Fatalf("call %d: status %d, want %d; body %s", i, r.status, want.status, r.body)
		}
		resp := decodeResponse(t, r)
		if got := format(resp.GetStatuses()[0]); got != want.status0 {
			t.Errorf("call %d: statuses[0] = %q, want %q", i, got, want.status0)
		}
		if got := r.header.Get("RateLimit"); got != want.ratelimt {
			t.Errorf("call %d: RateLimit %q, want %q", i, got, want.ratelimt)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"per_ip";q=3;w=60` {
			t.Errorf("call %d: RateLimit-Policy %q", i, got)
		}
		if got := r.header.Get("Retry-After"); got != want.retry {
			t.Errorf("call %d: Retry-After %q, want %q", i, got, want.retry)
		}
	}
	// The JSON itself is protojson's: lowerCamelCase names, enums by name,
	// durations in seconds, zero fields left out.
	r := post(t, hs, "", body)
	for _, s := range []string{`"overallCode":"OVER_LIMIT"`, `"code":"OVER_LIMIT"`, `"requestsPerUnit":3`, `"unit":"MINUTE"`, `"durationUntilReset":"45s"`, `"responseHeadersToAdd"`} {
		if !strings.Contains(strings.ReplaceAll(r.body, " ", ""), s) {
			t.Errorf("body %s lacks %s", r.body, s)
		}
	}
	if strings.Contains(r.body, "limitRemaining") {
		t.Errorf("body %s holds limitRemaining 0, which protojson leaves out", r.body)
	}
	// Field names as in the proto are read too; hits_addend 0 checks.
	clock.Advance(time.Minute)
	r = post(t, hs, "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}],"hits_addend":"0"}],"hits_addend":2}`)
	if r.status != http.StatusOK {
		t.Fatalf("proto names: status %d, body %s", r.status, r.body)
	}
	if got := format(decodeResponse(t, r).GetStatuses()[0]); got != "OK 3/MINUTE per_ip r=3 t=0s" {
		t.Errorf("proto names: statuses[0] = %q", got)
	}
	// Unknown domain: 200, OK, no limit, no RateLimit fields.
	r = post(t, hs, "application/json", `{"domain":"nowhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`)
	if r.status != http.StatusOK || r.header.Get("RateLimit") != "" {
		t.Errorf("unknown domain: %d %v %s", r.status, r.header, r.body)
	}
	if got := format(decodeResponse(t, r).GetStatuses()[0]); got != "OK" {
		t.Errorf("unknown domain: statuses[0] = %q", got)
	}
}

func TestJSONFailClosed(t *testing.T) {
	t.Parallel()
	hs, _ := serveJSON(t, failingStore{})
	r := post(t, hs, "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"payment","value":"card"}]}]}`)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Errorf("fail_closed: status %d, Retry-After %q; want 429 and 1", r.status, r.header.Get("Retry-After"))
	}
	r = post(t, hs, "application/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`)
	if r.status != http.StatusOK || r.header.Get("Retry-After") != "" {
		t.Errorf("fail_open: status %d, Retry-After %q; want 200 and none", r.status, r.header.Get("Retry-After"))
	}
}

func TestJSONBadInput(t *testing.T) {
	t.Parallel()
	hs, _ := serveJSON(t, nil)
	for _, tc := range []struct {
		name   string
		body   string
		status int
		field  string
		detail string
	}{
		{"malformed", `{"domain": "edge",`, http.StatusBadRequest, "body", "not a RateLimitRequest"},
		{"empty body", ``, http.StatusBadRequest, "body", "body: empty"},
		{"blank body", " \n", http.StatusBadRequest, "body", "body: empty"},
		{"not an object", `[1, 2]`, http.StatusBadRequest, "body", "not a RateLimitRequest"},
		{"unknown field", `{"domain":"edge","descriptorz":[]}`, http.StatusBadRequest, "descriptorz", "unknown field"},
		{"wrong type", `{"domain":"edge","hitsAddend":"many"}`, http.StatusBadRequest, "hitsAddend", "hitsAddend"},
		{"negative hits", `{"domain":"edge","hitsAddend":-1}`, http.StatusBadRequest, "hitsAddend", "hitsAddend"},
		{"empty domain", `{"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, http.StatusBadRequest, "domain", "domain: empty"},
		{"no descriptors", `{"domain":"edge"}`, http.StatusBadRequest, "descriptors", "descriptors: empty"},
		{"empty key", `{"domain":"edge","descriptors":[{"entries":[{"value":"b"}]}]}`, http.StatusBadRequest, "descriptors[0].entries[0].key", "empty"},
		{"unknown unit", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":1,"unit":"FORTNIGHT"}}]}`, http.StatusBadRequest, "unit", "unit"},
		{"too large", `{"domain":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge, "body", "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, hs, "application/json", tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			var p httpapi.Problem
			if err := json.Unmarshal([]byte(r.body), &p); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			if p.Status != tc.status || p.Title != http.StatusText(tc.status) || p.Type != "about:blank" {
				t.Errorf("problem %+v", p)
			}
			if p.Field != tc.field {
				t.Errorf("field %q, want %q (detail %q)", p.Field, tc.field, p.Detail)
			}
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q lacks %q", p.Detail, tc.detail)
			}
		})
	}
}

func TestJSONMethod(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, nil)
	h := envoyrls.JSONHandler(srv)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/json", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
}

func TestJSONOmitHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, nil)
	h := envoyrls.New(srv, &envoyrls.Options{OmitHeaders: true}).JSONHandler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`)))
	if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" || strings.Contains(rec.Body.String(), "responseHeadersToAdd") {
		t.Errorf("OmitHeaders: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}
