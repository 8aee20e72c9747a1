package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestLeases: a concurrency rule works through the HTTP API. A limit of 2
// admits two leases of four held at once; a release lets another in; a
// renew keeps a lease; rules of other algorithms are refused here, and
// the concurrency rule is refused by POST /v1/allow.
func TestLeases(t *testing.T) {
	d, err := config.Parse("api.yaml", []byte("domain: api\ndescriptors:\n  - key: job\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: cfg, Limiter: floodgate.Options{Clock: floodgatetest.NewFakeClock(start)}})
	if err != nil {
		t.Fatal(err)
	}
	h := servertest.Handler(t, srv, nil)
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		var out map[string]any
		if rec.Body.Len() > 0 {
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
			}
		}
		return rec.Code, out
	}
	job := `{"domain": "api", "descriptors": [{"entries": [{"key": "job", "value": "export"}]}]}`
	var ids []string
	for i := range 4 {
		code, out := post("/v1/leases", job)
		id, _ := out["id"].(string)
		if code != http.StatusOK || (out["allowed"] == true) != (i < 2) || (id != "") != (i < 2) {
			t.Fatalf("acquire %d: %d %v, want the first two held", i, code, out)
		}
		if id != "" {
			ids = append(ids, id)
		}
	}
	if code, out := post("/v1/leases/"+ids[0]+"/renew", ""); code != http.StatusOK || out["allowed"] != true || out["id"] != ids[0] {
		t.Errorf("renew: %d %v", code, out)
	}
	if code, _ := post("/v1/leases/"+ids[0]+"/release", ""); code != http.StatusNoContent {
		t.Errorf("release: %d", code)
	}
	if code, out := post("/v1/leases", job); code != http.StatusOK || out["allowed"] != true {
		t.Errorf("acquire after a release: %d %v", code, out)
	}
	if code, out := post("/v1/leases", `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "1"}]}]}`); code != http.StatusBadRequest || !strings.Contains(out["detail"].(string), "not a concurrency limit") {
		t.Errorf("a lease on a rate rule: %d %v", code, out)
	}
	if code, out := post("/v1/allow", job); code != http.StatusBadRequest || !strings.Contains(out["detail"].(string), "POST /v1/leases") {
		t.Errorf("a decision on the concurrency rule: %d %v", code, out)
	}
	inline := `{"key": "k", "limit": {"algorithm": "concurrency", "limit": 1, "period": "30s"}}`
	if code, out := post("/v1/leases", inline); code != http.StatusOK || out["allowed"] != true || out["id"] == nil {
		t.Errorf("an inline lease: %d %v", code, out)
	}
	if code, out := post("/v1/leases", inline); code != http.StatusOK || out["allowed"] != false {
		t.Errorf("a second inline lease of 1: %d %v", code, out)
	}
	if code, _ := post("/v1/leases/l1.bm90/release", ""); code != http.StatusNotFound {
		t.Errorf("release of a bad id: %d, want 404", code)
	}
	// A forged id (the unsigned form of earlier versions, or the signed
	// form with a tag of its own) names nothing: 404, and the rule is
	// untouched.
	alter := func(id string) string {
		i, c := len(id)-5, byte('A')
		if id[i] == c {
			c = 'B'
		}
		return id[:i] + string(c) + id[i+1:]
	}
	forge := func(prefix string, v any) string {
		b, _ := json.Marshal(v)
		return prefix + base64.RawURLEncoding.EncodeToString(b)
	}
	lease := map[string]any{"i": "forged", "r": map[string]any{"domain": "api", "hits": 1,
		"descriptors": []any{map[string]any{"entries": []any{map[string]string{"key": "job", "value": "export"}}}}}}
	for _, forged := range []string{forge("l1.", lease), forge("l2.", lease) + ".AAAA", alter(ids[1])} {
		if code, out := post("/v1/leases/"+forged+"/release", ""); code != http.StatusNotFound {
			t.Errorf("release of a forged lease %s: %d %v, want 404", forged, code, out)
		}
	}
	if code, out := post("/v1/leases", job); code != http.StatusOK || out["allowed"] != false {
		t.Errorf("acquire after the forged releases: %d %v, want denied (the two leases still held)", code, out)
	}
}
