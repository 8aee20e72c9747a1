package envoyrls_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/server/httpapi"
)

// FuzzJSONHandler posts any body to POST /json: whatever it holds, the
// answer is a decision (200 or 429, a RateLimitResponse that agrees with the
// status) or the caller's error (400 or 413, a problem details body), never a
// 5xx and never a panic. The seed corpus is in testdata/fuzz/FuzzJSONHandler.
func FuzzJSONHandler(f *testing.F) {
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}`))
	srv, _ := newServer(f, nil)
	h := envoyrls.JSONHandler(srv)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			var resp rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("status %d with a body that is no RateLimitResponse: %v\n%s", rec.Code, err, rec.Body)
			}
			over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT
			if over != (rec.Code == http.StatusTooManyRequests) {
				t.Fatalf("status %d for overall_code %v", rec.Code, resp.GetOverallCode())
			}
			if len(resp.GetStatuses()) == 0 {
				t.Fatalf("a decision without statuses: %s", rec.Body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var p httpapi.Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("status %d with a body that is no problem details: %v\n%s", rec.Code, err, rec.Body)
			}
			if p.Status != rec.Code || p.Detail == "" || rec.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d with problem %+v, Content-Type %q", rec.Code, p, rec.Header().Get("Content-Type"))
			}
		default:
			t.Fatalf("status %d for body %q:\n%s", rec.Code, body, rec.Body)
		}
	})
}
