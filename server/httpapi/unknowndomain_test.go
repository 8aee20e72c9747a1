package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestUnknownDomainAnswer: POST /v1/allow of a domain the config lacks
// says unknown_domain; one of a known domain whose descriptor matches no
// rule says only no_rule. Both are allowed.
func TestUnknownDomainAnswer(t *testing.T) {
	h := apiHandler(t)
	for _, tc := range []struct {
		name, body    string
		unknownDomain bool
	}{
		{"typo in the domain", `{"domain": "apj", "descriptors": [{"entries": [{"key": "user", "value": "1"}]}]}`, true},
		{"unknown key of a known domain", `{"domain": "api", "descriptors": [{"entries": [{"key": "usr", "value": "1"}]}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/v1/allow", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var out struct {
				Allowed       bool `json:"allowed"`
				UnknownDomain bool `json:"unknown_domain"`
				Descriptors   []struct {
					NoRule bool `json:"no_rule"`
				} `json:"descriptors"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if !out.Allowed || out.UnknownDomain != tc.unknownDomain || len(out.Descriptors) != 1 || !out.Descriptors[0].NoRule {
				t.Errorf("answer %s; want allowed, unknown_domain %v, one descriptor with no_rule", rec.Body, tc.unknownDomain)
			}
		})
	}
}
