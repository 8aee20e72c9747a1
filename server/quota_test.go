package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// quotaYAML has two quotas (quota_mode), a plain limit, an unlimited rule,
// and a quota in shadow mode.
const quotaYAML = `
domain: q
descriptors:
  - key: plan
    value: basic
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {owner: billing}
  - key: plan
    value: premium
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
  - key: tries
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
`

func newQuotaServer(t *testing.T, opts server.Options) *server.Server {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	ms := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { ms.Close() })
	d, err := config.Parse("q.yaml", []byte(quotaYAML))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Config, opts.Limiter = ms, cfg, floodgate.Options{Clock: clock}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// ds parses "plan=basic user=u1" into one single-entry descriptor per word.
func ds(s string) []server.Descriptor {
	var out []server.Descriptor
	for _, kv := range strings.Fields(s) {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, server.Descriptor{Entries: []config.Entry{{Key: k, Value: v}}})
	}
	return out
}

// codes is "OK: OK OVER_LIMIT" for a result: the overall code, then each
// descriptor's, with a "q" after a quota's.
func codes(res server.Result) string {
	var b strings.Builder
	b.WriteString(res.Code.String() + ":")
	for _, st := range res.Statuses {
		b.WriteString(" " + st.Code.String())
		if st.Quota {
			b.WriteString("q")
		}
	}
	return b.String()
}

// TestQuotaMode decides requests with quotas as upstream's
// shouldRateLimitWorker does: a quota over its limit keeps OVER_LIMIT, and
// the request is OVER_LIMIT only when every quota of it is, or a plain
// limit is.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{})
	steps := []struct {
		ds   string
		want string
	}{
		{"plan=basic plan=premium", "OK: OKq OKq"},
		// basic (1 a minute) is used up; premium still has one.
		{"plan=basic plan=premium", "OK: OVER_LIMITq OKq"},
		// Both quotas are over: the request is.
		{"plan=basic plan=premium", "OVER_LIMIT: OVER_LIMITq OVER_LIMITq"},
		// A single quota over is every quota of the request.
		{"plan=basic", "OVER_LIMIT: OVER_LIMITq"},
		// A descriptor without a rule is no quota: the quota decides.
		{"plan=basic nothing=x", "OVER_LIMIT: OVER_LIMITq OK"},
		// An unlimited rule is no quota either.
		{"plan=basic health=x", "OVER_LIMIT: OVER_LIMITq OK"},
		// A quota in shadow mode is answered OK: it passes.
		{"plan=basic tries=x", "OK: OVER_LIMITq OKq"},
		// A plain limit over denies whatever the quotas.
		{"user=u1", "OK: OK"},
		{"user=u1", "OK: OK"},
		{"user=u1 tries=x", "OVER_LIMIT: OVER_LIMIT OKq"},
	}
	for i, s := range steps {
		res, err := srv.Decide(t.Context(), "q", ds(s.ds), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := codes(res); got != s.want {
			t.Errorf("step %d (%s): %s, want %s", i, s.ds, got, s.want)
		}
	}
}

// TestQuotaDecidedApart: a quota over its limit takes nothing from, and
// denies nothing of, the request's other descriptors, which are decided
// all or nothing among themselves.
func TestQuotaDecidedApart(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{})
	decide := func(s string) server.Result {
		t.Helper()
		res, err := srv.Decide(t.Context(), "q", ds(s), 1)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	decide("plan=basic") // basic is used up
	res := decide("user=u2 plan=basic plan=premium")
	if got := codes(res); got != "OK: OK OVER_LIMITq OKq" {
		t.Fatalf("%s", got)
	}
	if got := res.Statuses[0].Decision.Remaining; got != 1 {
		t.Errorf("user=u2 remaining %d after the request, want 1: the quota's denial must not undo it", got)
	}
	// Every quota over (basic; premium's second unit is taken) and user=u2
	// within its limit: the request is denied, and user=u2 was counted,
	// as upstream counts every descriptor.
	decide("plan=premium")
	res = decide("user=u2 plan=basic plan=premium")
	if got := codes(res); got != "OVER_LIMIT: OK OVER_LIMITq OVER_LIMITq" {
		t.Errorf("%s", got)
	}
	if got := res.Statuses[0].Decision.Remaining; got != 0 {
		t.Errorf("user=u2 remaining %d, want 0", got)
	}
}

// TestGlobalQuotaMode: with Options.GlobalQuotaMode (upstream's
// QUOTA_MODE) every descriptor but an unlimited one is a quota, those
// without a rule too, which always pass.
func TestGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{GlobalQuotaMode: true})
	steps := []struct {
		ds   string
		want string
	}{
		{"user=u1", "OK: OKq"},
		{"user=u1", "OK: OKq"},
		{"user=u1", "OVER_LIMIT: OVER_LIMITq"},
		{"user=u1 user=u2", "OK: OVER_LIMITq OKq"},
		{"user=u1 nothing=x", "OK: OVER_LIMITq OKq"},
		{"user=u1 health=x", "OVER_LIMIT: OVER_LIMITq OK"},
		{"health=x", "OK: OK"},
	}
	for i, s := range steps {
		res, err := srv.Decide(t.Context(), "q", ds(s.ds), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := codes(res); got != s.want {
			t.Errorf("step %d (%s): %s, want %s", i, s.ds, got, s.want)
		}
	}
	// A limit the request brings is a quota too.
	lim := floodgate.Limit{Limit: 0, Period: 60e9}
	d := []server.Descriptor{{Entries: []config.Entry{{Key: "own", Value: "x"}}, Limit: &lim}, ds("user=u3")[0]}
	res, err := srv.Decide(t.Context(), "q", d, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := codes(res); got != "OK: OVER_LIMITq OKq" {
		t.Errorf("own limit: %s", got)
	}
}

// TestQuotaModeWithGlobalShadow: global shadow mode answers OK to what the
// quotas deny, as upstream applies SHADOW_MODE after QUOTA_MODE.
func TestQuotaModeWithGlobalShadow(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{GlobalShadowMode: true})
	for i, want := range []string{"OK: OKq", "OK: OVER_LIMITq"} {
		res, err := srv.Decide(t.Context(), "q", ds("plan=basic"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := codes(res); got != want || res.GlobalShadow != (i == 1) {
			t.Errorf("request %d: %s (global shadow %v), want %s", i, got, res.GlobalShadow, want)
		}
	}
}

// TestQuotaCode is QuotaCode's table.
func TestQuotaCode(t *testing.T) {
	t.Parallel()
	ok, over := server.Status{Code: server.OK}, server.Status{Code: server.OverLimit}
	q := func(st server.Status) server.Status { st.Quota = true; return st }
	for _, tc := range []struct {
		sts  []server.Status
		want server.Code
	}{
		{nil, server.OK},
		{[]server.Status{ok}, server.OK},
		{[]server.Status{over}, server.OverLimit},
		{[]server.Status{q(over)}, server.OverLimit},
		{[]server.Status{q(over), q(ok)}, server.OK},
		{[]server.Status{q(over), q(over)}, server.OverLimit},
		{[]server.Status{q(over), ok}, server.OverLimit},
		{[]server.Status{q(ok), over}, server.OverLimit},
		{[]server.Status{q(over), q(ok), over}, server.OverLimit},
	} {
		if got := server.QuotaCode(tc.sts); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.sts, got, tc.want)
		}
	}
}

// TestQuotaModeHTTP: POST /v1/allow answers a request its quotas admit
// with allowed true, each quota marked, the one over still OVER_LIMIT.
func TestQuotaModeHTTP(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{})
	h := servertest.Handler(t, srv, nil)
	body := `{"domain": "q", "descriptors": [{"entries": [{"key": "plan", "value": "basic"}]}, {"entries": [{"key": "plan", "value": "premium"}]}]}`
	for i, want := range []struct {
		allowed bool
		codes   string
	}{{true, "OK OK"}, {true, "OVER_LIMIT OK"}, {false, "OVER_LIMIT OVER_LIMIT"}} {
		resp, out := post(t, h, "/v1/allow", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %v", i, resp.StatusCode, out)
		}
		var got []string
		for _, d := range out["descriptors"].([]any) {
			m := d.(map[string]any)
			if m["quota_mode"] != true {
				t.Errorf("request %d: descriptor without quota_mode: %v", i, m)
			}
			got = append(got, fmt.Sprint(m["code"]))
		}
		if out["allowed"] != want.allowed || strings.Join(got, " ") != want.codes {
			t.Errorf("request %d: allowed %v, codes %v; want %v, %s", i, out["allowed"], got, want.allowed, want.codes)
		}
	}
}

// TestQuotaReservation: a reservation holds a quota like any other limit,
// all or nothing: a quota over its limit denies it.
func TestQuotaReservation(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{})
	if _, err := srv.Decide(t.Context(), "q", ds("plan=basic"), 1); err != nil {
		t.Fatal(err)
	}
	_, res, err := srv.Reserve(t.Context(), "q", ds("plan=basic plan=premium"), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := codes(res); got != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Errorf("%s, want the reservation denied by the quota over its limit", got)
	}
}

// TestConfigShowsQuotaAndMetadata: GET /v1/config lists a rule's
// quota_mode and metadata.
func TestConfigShowsQuotaAndMetadata(t *testing.T) {
	t.Parallel()
	srv := newQuotaServer(t, server.Options{})
	rec := httptest.NewRecorder()
	servertest.Handler(t, srv, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/config", nil))
	var out struct {
		Rules []httpapi.RuleJSON `json:"rules"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	found := false
	for _, r := range out.Rules {
		if r.ID == "q|plan=basic" {
			found = true
			if !r.QuotaMode || r.Metadata["owner"] != "billing" {
				t.Errorf("rule %+v", r)
			}
		}
		if r.ID == "q|user" && (r.QuotaMode || r.Metadata != nil) {
			t.Errorf("rule %+v", r)
		}
	}
	if !found {
		t.Errorf("no rule q|plan=basic in %s", rec.Body)
	}
}

// TestLeaseIgnoresQuota: a lease holds every concurrency rule of its
// request or none, quota_mode and -quota-mode notwithstanding: a rule
// over its limit denies the lease, and the answer says so.
func TestLeaseIgnoresQuota(t *testing.T) {
	t.Parallel()
	d, err := config.Parse("l.yaml", []byte(`
domain: l
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: concurrency}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	clock := floodgatetest.NewFakeClock(start)
	ms := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { ms.Close() })
	srv, err := server.New(server.Options{Store: ms, Config: cfg, Limiter: floodgate.Options{Clock: clock}, GlobalQuotaMode: true})
	if err != nil {
		t.Fatal(err)
	}
	h := servertest.Handler(t, srv, nil)
	body := `{"domain": "l", "descriptors": [{"entries": [{"key": "a", "value": "x"}]}, {"entries": [{"key": "b", "value": "x"}]}]}`
	for i, want := range []bool{true, false} {
		resp, out := post(t, h, "/v1/leases", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("lease %d: status %d: %v", i, resp.StatusCode, out)
		}
		_, hasID := out["id"]
		if out["allowed"] != want || hasID != want {
			t.Errorf("lease %d: allowed %v, id %v; want %v", i, out["allowed"], out["id"], want)
		}
		for _, d := range out["descriptors"].([]any) {
			if d.(map[string]any)["quota_mode"] != nil {
				t.Errorf("lease %d: a descriptor marked as a quota: %v", i, d)
			}
		}
	}
}
