package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/server/transport"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// The tests of the trust boundary around accounts (docs/guarantees.md,
// "Trust and limits"): two client tokens, A and B, are two tenants; B
// must not bill, settle, replay or starve A through reservation and
// lease ids or Idempotency-Keys.

// The tokens of the trust tests.
const (
	tokenA     = "client-a-0123456789abcdef"
	tokenB     = "client-b-0123456789abcdef"
	tokenAdmin = "admin-z-0123456789abcdef"
)

// billingYAML: a durable quota of 100 an hour per tenant, one whose rule
// fails open explicitly, and a concurrency rule.
const billingYAML = `
domain: billing
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100, durable: true}
  - key: trial
    rate_limit: {unit: hour, requests_per_unit: 100, durable: true, failure_mode: fail_open}
  - key: job
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: concurrency}
`

// acme is the descriptors of tenant acme, reserving cost.
func acme(cost int) string {
	return fmt.Sprintf(`{"domain": "billing", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}], "hits": %d}`, cost)
}

// trust is a server of billingYAML under test: its handler and its
// ledger.
type trust struct {
	t  *testing.T
	h  http.Handler
	lg *sqlite.Ledger
}

// trustServer serves billingYAML over store, its durable quotas in lg,
// with the tokens above, fail_open by default as `floodgate serve`.
func trustServer(t *testing.T, store floodgate.Store, lg *sqlite.Ledger, clock *floodgatetest.FakeClock) *trust {
	t.Helper()
	q, err := ledger.Wrap(store, ledger.Durable(lg, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := config.Parse("billing.yaml", []byte(billingYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline that a loaded host meets: these tests are not about
	// timeouts.
	lo := floodgate.Options{FailurePolicy: floodgate.FailOpen, Timeout: time.Minute}
	if clock != nil {
		lo.Clock = clock
	}
	srv, err := server.New(server.Options{Store: q, Config: cfg, Limiter: lo})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	clients, admins := filepath.Join(dir, "clients"), filepath.Join(dir, "admins")
	if err := os.WriteFile(clients, []byte(tokenA+"\n"+tokenB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(admins, []byte(tokenAdmin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := transport.LoadAuth(clients, admins)
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(srv, &httpapi.Options{Auth: auth, IDKeys: [][]byte{httpapi.TestIDKey}})
	if err != nil {
		t.Fatal(err)
	}
	return &trust{t: t, h: api.Handler(nil), lg: lg}
}

// openLedger is an SQLite ledger in the test's directory.
func openLedger(t *testing.T) *sqlite.Ledger {
	t.Helper()
	lg, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	return lg
}

// trustStores runs f on a memory store (on a fake clock) and on a Redis
// store (on the server's clock), each with a ledger of its own; flush,
// for Redis, loses every key.
func trustStores(t *testing.T, f func(t *testing.T, tr *trust, flush func())) {
	t.Run("memory", func(t *testing.T) {
		clock := floodgatetest.NewFakeClock(time.Now().Truncate(time.Hour).Add(time.Minute))
		s := memstore.New(&memstore.Options{Clock: clock})
		t.Cleanup(func() { s.Close() })
		f(t, trustServer(t, s, openLedger(t), clock), nil)
	})
	t.Run("redis", func(t *testing.T) {
		r := redistest.Standalone(t)
		s, err := redisstore.Open(t.Context(), "redis://"+r.Addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		f(t, trustServer(t, s, openLedger(t), nil), func() { r.MustCLI(t, "FLUSHALL") })
	})
}

// do sends a request as token (empty: none) and decodes the JSON answer.
func (tr *trust) do(token, path, body string, header ...string) (int, map[string]any) {
	tr.t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	tr.h.ServeHTTP(rec, r)
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			tr.t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	return rec.Code, out
}

// reserve reserves body as token and returns the id, failing unless held.
func (tr *trust) reserve(token, body string, header ...string) (string, map[string]any) {
	tr.t.Helper()
	code, out := tr.do(token, "/v1/reservations", body, header...)
	id, _ := out["id"].(string)
	if code != http.StatusOK || out["allowed"] != true || id == "" {
		tr.t.Fatalf("reserve %s: %d %v", body, code, out)
	}
	return id, out
}

// billed is what the ledger holds for tenant acme in the window of at.
func (tr *trust) billed(at time.Time) int64 {
	tr.t.Helper()
	u, err := tr.lg.Usage(tr.t.Context(), "d|billing|tenant=acme", time.Hour, at)
	if err != nil {
		tr.t.Fatal(err)
	}
	return u.Units
}

// window is the start of the window the reservation id holds units in
// (a durable quota's): the store's, which a test that reads the ledger
// uses rather than its own clock, so that an hour that turns between
// the reserve and the read changes nothing.
func window(t *testing.T, id string) time.Time {
	t.Helper()
	w, _ := payload(t, id)["k"].([]any)[0].(map[string]any)["w"].(float64)
	if w == 0 {
		t.Fatalf("id %s holds no window", id)
	}
	return time.UnixMicro(int64(w))
}

// reservationMetrics is the lines of floodgate_reservations_total that
// /metrics serves.
func (tr *trust) reservationMetrics() string {
	tr.t.Helper()
	rec := httptest.NewRecorder()
	tr.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var lines []string
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "floodgate_reservations_total{") {
			lines = append(lines, sc.Text())
		}
	}
	return strings.Join(lines, "\n")
}

// payload decodes the JSON that an id carries, and rebuild encodes an
// altered one with the id's prefix and tag (if it has one).
func payload(t *testing.T, id string) map[string]any {
	t.Helper()
	body, _, _ := strings.Cut(id[3:], ".")
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatalf("id %s: %v", id, err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("id %s: %v", id, err)
	}
	return v
}

func rebuild(t *testing.T, prefix string, v map[string]any, tagOf string) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	id := prefix + base64.RawURLEncoding.EncodeToString(b)
	if _, tag, ok := strings.Cut(tagOf[3:], "."); ok {
		id += "." + tag
	}
	return id
}

// TestTrustForgedCommit: client B cannot bill tenant A with a forged id
// (finding 1 of issue 25: a forged unsigned id for another tenant's
// durable key, committed with 1,000,000 units, answered 404 and was
// billed to the victim, over limit for the whole window; a forged cancel
// wrote a 0-unit row). Every forged, altered or borrowed id answers 404
// and changes nothing: not the ledger, not the counter, not the metrics.
func TestTrustForgedCommit(t *testing.T) {
	trustStores(t, func(t *testing.T, tr *trust, _ func()) {
		idA, _ := tr.reserve(tokenA, acme(10))
		p := payload(t, idA)
		item := p["k"].([]any)[0].(map[string]any)
		// The unsigned form of earlier versions, naming A's hold.
		old := rebuild(t, "r1.", map[string]any{"i": p["i"], "k": []any{map[string]any{"k": item["k"], "l": item["l"], "d": true, "w": item["w"]}}}, "r1.")
		// A's id with a million units held, A's tag kept.
		more := map[string]any{}
		for k, v := range p {
			more[k] = v
		}
		bigItem := map[string]any{}
		for k, v := range item {
			bigItem[k] = v
		}
		bigItem["u"] = 1_000_000
		more["k"] = []any{bigItem}
		altered := rebuild(t, idA[:3], more, idA)
		// An id of another store ID on A's key, with a tag of its own.
		forged := rebuild(t, idA[:3], map[string]any{"i": "forged", "k": []any{item}, "e": p["e"]}, idA[:3]+"x.AAAA")
		before := tr.reservationMetrics()
		for _, c := range []struct{ name, token, id string }{
			{"unsigned r1 id", tokenB, old},
			{"altered units", tokenB, altered},
			{"altered units, as A", tokenA, altered},
			{"forged tag", tokenB, forged},
			{"A's own id", tokenB, idA},
		} {
			for _, step := range []string{"commit", "cancel"} {
				if code, out := tr.do(c.token, "/v1/reservations/"+c.id+"/"+step, `{"cost": 1000000}`); code != http.StatusNotFound {
					t.Errorf("%s of %s: %d %v, want 404", step, c.name, code, out)
				}
			}
		}
		if got := tr.billed(window(t, idA)); got != 0 {
			t.Errorf("the ledger holds %d units for A, want 0", got)
		}
		if after := tr.reservationMetrics(); after != before {
			t.Errorf("the metrics changed:\n%s\nwant\n%s", after, before)
		}
		// A's own id settles A's hold, once, as held.
		code, out := tr.do(tokenA, "/v1/reservations/"+idA+"/commit", `{"cost": 7}`)
		if code != http.StatusOK || fmt.Sprint(out["settlements"]) != "[map[billed:7 charged:0 limit:100 refunded:3 remaining:93 short:0]]" {
			t.Errorf("A's commit: %d %v, want 7 billed, 93 remaining", code, out)
		}
		if got := tr.billed(window(t, idA)); got != 7 {
			t.Errorf("the ledger holds %d units for A, want 7", got)
		}
	})
}

// TestTrustForgedWindow: a commit cannot name the window it is billed in
// (finding 2: an id naming the previous hour was billed to that hour,
// and after a restart the 100/h key admitted another 100 in the same
// hour). An id whose window was altered is 404; the commit of the id the
// service made is billed in the window of the store's hold.
func TestTrustForgedWindow(t *testing.T) {
	trustStores(t, func(t *testing.T, tr *trust, _ func()) {
		idA, _ := tr.reserve(tokenA, acme(40))
		p := payload(t, idA)
		item := p["k"].([]any)[0].(map[string]any)
		w := int64(item["w"].(float64))
		earlier := map[string]any{"k": item["k"], "l": item["l"], "u": item["u"], "d": true, "w": w - time.Hour.Microseconds()}
		for _, id := range []string{
			rebuild(t, "r1.", map[string]any{"i": p["i"], "k": []any{earlier}}, "r1."),
			rebuild(t, idA[:3], map[string]any{"i": p["i"], "k": []any{earlier}, "e": p["e"]}, idA),
		} {
			if code, out := tr.do(tokenA, "/v1/reservations/"+id+"/commit", `{"cost": 40}`); code != http.StatusNotFound {
				t.Errorf("commit of an id naming the previous hour: %d %v, want 404", code, out)
			}
		}
		if code, out := tr.do(tokenA, "/v1/reservations/"+idA+"/commit", `{"cost": 40}`); code != http.StatusOK {
			t.Fatalf("commit: %d %v", code, out)
		}
		now := window(t, idA)
		if got, prev := tr.billed(now), tr.billed(now.Add(-time.Hour)); got != 40 || prev != 0 {
			t.Errorf("the ledger holds %d units this hour and %d the hour before, want 40 and 0", got, prev)
		}
	})
}

// TestTrustIdempotencyKeys: an Idempotency-Key belongs to its caller
// (finding 3: the store's ID was a hash of the key alone, so client B
// sending A's key got A's reservation back, and cancelled it by guessing
// "order-1002", after which A's commit was 422).
func TestTrustIdempotencyKeys(t *testing.T) {
	trustStores(t, func(t *testing.T, tr *trust, _ func()) {
		key := []string{"Idempotency-Key", "order-1002"}
		idA, _ := tr.reserve(tokenA, acme(10), key...)
		idB, outB := tr.reserve(tokenB, acme(10), key...)
		if outB["replayed"] == true || idB == idA || payload(t, idB)["i"] == payload(t, idA)["i"] {
			t.Fatalf("B's reserve with A's Idempotency-Key: %v, want a reservation of its own", outB)
		}
		if _, again := tr.reserve(tokenA, acme(10), key...); again["replayed"] != true || again["id"] != idA {
			t.Errorf("A's retry: %v, want A's reservation, replayed", again)
		}
		if code, out := tr.do(tokenB, "/v1/reservations/"+idA+"/cancel", ""); code != http.StatusNotFound {
			t.Errorf("B's cancel of A's id: %d %v, want 404", code, out)
		}
		if code, out := tr.do(tokenA, "/v1/reservations/"+idA+"/commit", `{"cost": 10}`); code != http.StatusOK {
			t.Errorf("A's commit: %d %v, want 200", code, out)
		}
		if code, out := tr.do(tokenB, "/v1/reservations/"+idB+"/cancel", ""); code != http.StatusOK {
			t.Errorf("B's cancel of its own: %d %v, want 200", code, out)
		}
		if got := tr.billed(window(t, idA)); got != 10 {
			t.Errorf("the ledger holds %d units, want A's 10", got)
		}
	})
}

// TestTrustLeases: a lease's id is signed and bound to its caller as a
// reservation's is (finding 5): B cannot renew or release A's lease, nor
// an altered or unsigned one.
func TestTrustLeases(t *testing.T) {
	trustStores(t, func(t *testing.T, tr *trust, _ func()) {
		job := `{"domain": "billing", "descriptors": [{"entries": [{"key": "job", "value": "export"}]}]}`
		code, out := tr.do(tokenA, "/v1/leases", job)
		idA, _ := out["id"].(string)
		if code != http.StatusOK || idA == "" {
			t.Fatalf("A's lease: %d %v", code, out)
		}
		p := payload(t, idA)
		for _, c := range []struct{ name, id string }{
			{"A's id", idA},
			{"unsigned l1 id", rebuild(t, "l1.", p, "l1.")},
			{"altered lease", rebuild(t, idA[:3], map[string]any{"i": "other", "r": p["r"]}, idA)},
		} {
			for _, step := range []string{"renew", "release"} {
				if code, out := tr.do(tokenB, "/v1/leases/"+c.id+"/"+step, ""); code != http.StatusNotFound {
					t.Errorf("B's %s of %s: %d %v, want 404", step, c.name, code, out)
				}
			}
		}
		if code, out := tr.do(tokenB, "/v1/leases", job); code != http.StatusOK || out["allowed"] != false {
			t.Errorf("B's lease while A holds the only unit: %d %v, want denied", code, out)
		}
		if code, _ := tr.do(tokenA, "/v1/leases/"+idA+"/release", ""); code != http.StatusNoContent {
			t.Errorf("A's release: %d, want 204", code)
		}
	})
}

// TestTrustLostHold: the commit of a durable reservation whose hold Redis
// lost is billed from the signed id, and says so (finding 4: it answered
// 404, billed, and the client could not tell). A retry bills nothing
// more; a cancel of a lost hold is 404 and bills nothing.
func TestTrustLostHold(t *testing.T) {
	trustStores(t, func(t *testing.T, tr *trust, flush func()) {
		if flush == nil {
			t.Skip("the memory store loses nothing while it runs")
		}
		doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		closeResponseSchemas(doc)
		settled := doc.Components.Schemas["SettleResponse"].Value
		idA, _ := tr.reserve(tokenA, acme(10))
		idC, _ := tr.reserve(tokenA, acme(5))
		flush()
		for range 2 {
			code, out := tr.do(tokenA, "/v1/reservations/"+idA+"/commit", `{"cost": 12}`)
			if code != http.StatusOK || out["hold_lost"] != true || fmt.Sprint(out["settlements"]) != "[map[billed:10 charged:0 limit:0 refunded:0 remaining:0 short:2]]" {
				t.Errorf("commit of 12 of a lost hold of 10: %d %v, want hold_lost, 10 billed, 2 short", code, out)
			}
			if err := settled.VisitJSON(map[string]any(out)); err != nil {
				t.Errorf("the answer does not match openapi.yaml's SettleResponse: %v", err)
			}
		}
		if code, out := tr.do(tokenA, "/v1/reservations/"+idC+"/cancel", ""); code != http.StatusNotFound {
			t.Errorf("cancel of a lost hold: %d %v, want 404", code, out)
		}
		if got := tr.billed(window(t, idA)); got != 10 {
			t.Errorf("the ledger holds %d units, want 10", got)
		}
	})
}

// brokenReserver is a store whose every call fails.
type brokenReserver struct{ brokenStore }

func (brokenReserver) ReadHolds(context.Context, floodgate.SettleRequest) ([]floodgate.HeldUnits, error) {
	return nil, errRefused
}

// TestTrustDurableFailsClosed: a durable quota fails closed unless its
// rule says otherwise, under a server whose default is fail_open
// (finding 6: under CPU saturation a durable quota's reserve failed open,
// allowed without an id, and its use was never billed).
func TestTrustDurableFailsClosed(t *testing.T) {
	tr := trustServer(t, brokenReserver{}, openLedger(t), nil)
	for _, path := range []string{"/v1/reservations", "/v1/allow"} {
		code, out := tr.do(tokenA, path, acme(1))
		if code != http.StatusServiceUnavailable || out["allowed"] != false || out["id"] != nil {
			t.Errorf("%s of a durable quota, store down: %d %v, want 503, denied", path, code, out)
		}
	}
	trial := `{"domain": "billing", "descriptors": [{"entries": [{"key": "trial", "value": "t"}]}]}`
	if code, out := tr.do(tokenA, "/v1/reservations", trial); code != http.StatusOK || out["allowed"] != true {
		t.Errorf("reserve of a durable quota whose rule says fail_open, store down: %d %v, want allowed", code, out)
	}
}

// TestTrustInspectAfterLoss: /v1/inspect of a durable key whose counter
// the store lost reports what the ledger says was used (finding 7: it
// reported the full quota until the next reserve).
func TestTrustInspectAfterLoss(t *testing.T) {
	clock := floodgatetest.NewFakeClock(time.Now().Truncate(time.Hour).Add(time.Minute))
	lg := openLedger(t)
	s1 := memstore.New(&memstore.Options{Clock: clock})
	defer s1.Close()
	tr := trustServer(t, s1, lg, clock)
	id, _ := tr.reserve(tokenA, acme(60))
	if code, out := tr.do(tokenA, "/v1/reservations/"+id+"/commit", `{"cost": 60}`); code != http.StatusOK {
		t.Fatalf("commit: %d %v", code, out)
	}
	// A restart on an empty store, the same ledger.
	s2 := memstore.New(&memstore.Options{Clock: clock})
	defer s2.Close()
	tr = trustServer(t, s2, lg, clock)
	inspect := `{"domain": "billing", "entries": [{"key": "tenant", "value": "acme"}]}`
	if code, out := tr.do(tokenAdmin, "/v1/inspect", inspect); code != http.StatusOK || out["remaining"] != float64(40) {
		t.Errorf("inspect after the loss: %d %v, want 40 remaining", code, out)
	}
}
