package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

const apiYAML = `
domain: api
descriptors:
  - key: user
    rate_limit:
      name: per_user
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /login
    rate_limit:
      unit: second
      requests_per_unit: 1
      algorithm: gcra
  - key: path
    value: /health
    rate_limit:
      unlimited: true
  - key: tenant
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: plan
    value: free
    rate_limit:
      name: free
      unit: hour
      requests_per_unit: 100
  - key: plan
    value: trial
    rate_limit:
      unit: hour
      requests_per_unit: 1
      replaces:
        - name: free
`

// start is a calendar minute, so window arithmetic in tests is simple.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newServer(t testing.TB, store floodgate.Store, yaml string) (*server.Server, *floodgatetest.FakeClock) {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	if store == nil {
		ms := memstore.New(&memstore.Options{Clock: clock})
		t.Cleanup(func() { ms.Close() })
		store = ms
	}
	var cfg *config.Config
	if yaml != "" {
		d, err := config.Parse("api.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err = config.New(d); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := server.New(server.Options{Store: store, Config: cfg, Limiter: floodgate.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	return srv, clock
}

func post(t *testing.T, h http.Handler, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	var out map[string]any
	if b, _ := io.ReadAll(resp.Body); len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s answered %d with non-JSON %q", path, resp.StatusCode, b)
		}
	}
	return resp, out
}

func TestAllowInline(t *testing.T) {
	srv, clock := newServer(t, nil, "")
	h := servertest.Handler(t, srv, nil)
	body := `{"key": "user:42", "limit": {"algorithm": "fixed_window", "limit": 2, "period": "1m", "name": "per_user"}, "cost": 1}`
	for i, want := range []struct {
		allowed   bool
		remaining float64
		retry     float64
	}{{true, 1, 0}, {true, 0, 0}, {false, 0, 60000}} {
		resp, out := post(t, h, "/v1/allow", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %v", i, resp.StatusCode, out)
		}
		if out["allowed"] != want.allowed || out["remaining"] != want.remaining || out["retry_after_ms"] != want.retry || out["limit"] != 2.0 {
			t.Errorf("request %d: %v, want allowed=%v remaining=%v retry_after_ms=%v", i, out, want.allowed, want.remaining, want.retry)
		}
		if got, want := resp.Header.Get("RateLimit-Policy"), `"per_user";q=2;w=60`; got != want {
			t.Errorf("RateLimit-Policy = %q, want %q", got, want)
		}
		if !want.allowed {
			if got := resp.Header.Get("Retry-After"); got != "60" {
				t.Errorf("Retry-After = %q, want 60", got)
			}
		}
	}
	clock.Advance(time.Minute)
	if _, out := post(t, h, "/v1/allow", body); out["allowed"] != true {
		t.Errorf("after the window: %v", out)
	}
	// Reset gives the budget back.
	post(t, h, "/v1/allow", body)
	if resp, _ := post(t, h, "/v1/reset", `{"key": "user:42", "limit": {"limit": 2, "period": "1m"}}`); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset: status %d", resp.StatusCode)
	}
	if _, out := post(t, h, "/v1/allow", body); out["remaining"] != 1.0 {
		t.Errorf("after reset: %v", out)
	}
}

func TestAllowDescriptors(t *testing.T) {
	srv, _ := newServer(t, nil, apiYAML)
	h := servertest.Handler(t, srv, nil)
	user := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "42"}]}, {"entries": [{"key": "path", "value": "/health"}]}]}`
	for i, want := range []bool{true, true, false} {
		resp, out := post(t, h, "/v1/allow", user)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, out)
		}
		if out["allowed"] != want {
			t.Errorf("request %d: allowed = %v, want %v (%v)", i, out["allowed"], want, out)
		}
		ds := out["descriptors"].([]any)
		if len(ds) != 2 {
			t.Fatalf("descriptors: %v", ds)
		}
		if d := ds[1].(map[string]any); d["unlimited"] != true || d["allowed"] != true {
			t.Errorf("the unlimited descriptor: %v", d)
		}
	}
	// Another user has a counter of its own.
	if _, out := post(t, h, "/v1/allow", strings.Replace(user, `"42"`, `"43"`, 1)); out["allowed"] != true {
		t.Errorf("user 43: %v", out)
	}
	// Shadow mode: denied by the limit, allowed by the answer.
	tenant := `{"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}]}`
	post(t, h, "/v1/allow", tenant)
	if _, out := post(t, h, "/v1/allow", tenant); out["allowed"] != true || out["descriptors"].([]any)[0].(map[string]any)["shadow_mode"] != true {
		t.Errorf("shadow mode: %v", out)
	}
	// hits 0 checks without consuming.
	peek := `{"domain": "api", "hits": 0, "descriptors": [{"entries": [{"key": "user", "value": "44"}]}]}`
	for range 3 {
		if _, out := post(t, h, "/v1/allow", peek); out["remaining"] != 2.0 {
			t.Errorf("peek: %v", out)
		}
	}
	// No rule matches: OK, nothing limited.
	if _, out := post(t, h, "/v1/allow", `{"domain": "nope", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`); out["allowed"] != true {
		t.Errorf("unknown domain: %v", out)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`floodgate_decisions_total{algorithm="fixed_window",domain="api",outcome="denied",rule="api|user"} 1`,
		`floodgate_decisions_total{algorithm="fixed_window",domain="api",outcome="shadow_denied",rule="api|tenant"} 1`,
		`floodgate_decisions_total{algorithm="",domain="api",outcome="unlimited",rule="api|path=/health"} 4`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestReplaces(t *testing.T) {
	srv, _ := newServer(t, nil, apiYAML)
	res, err := srv.Decide(context.Background(), "api", []server.Descriptor{
		{Entries: []config.Entry{{Key: "plan", Value: "free"}}},
		{Entries: []config.Entry{{Key: "plan", Value: "trial"}}},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses[0].Limited || !res.Statuses[1].Limited {
		t.Errorf("free should be replaced by trial: %+v", res.Statuses)
	}
	// A descriptor with a limit of its own (Envoy's override) has no rule,
	// as in envoyproxy/ratelimit: trial's entries with an override replace
	// nothing, and free with an override is not replaced.
	override := &floodgate.Limit{Limit: 5, Period: time.Minute}
	res, err = srv.Decide(context.Background(), "api", []server.Descriptor{
		{Entries: []config.Entry{{Key: "plan", Value: "free"}}},
		{Entries: []config.Entry{{Key: "plan", Value: "trial"}}, Limit: override},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Statuses[0].Limited || !res.Statuses[1].Limited || res.Statuses[1].Rule != nil || res.Statuses[1].Limit.Limit != 5 {
		t.Errorf("trial with an override replaced free, or took a rule: %+v", res.Statuses)
	}
	res, err = srv.Decide(context.Background(), "api", []server.Descriptor{
		{Entries: []config.Entry{{Key: "plan", Value: "free"}}, Limit: override},
		{Entries: []config.Entry{{Key: "plan", Value: "trial"}}},
	}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Statuses[0].Limited || res.Statuses[0].Limit.Limit != 5 || !res.Statuses[1].Limited {
		t.Errorf("free with an override was replaced: %+v", res.Statuses)
	}
}

func TestBadInput(t *testing.T) {
	srv, _ := newServer(t, nil, apiYAML)
	h := servertest.Handler(t, srv, nil)
	for _, tc := range []struct {
		name, body, field string
		status            int
	}{
		{"empty body", ``, "body", 400},
		{"not JSON", `{"key":`, "body", 400},
		{"unknown field", `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "colour": "red"}`, "colour", 400},
		{"wrong type", `{"key": "k", "limit": {"limit": "ten", "period": "1s"}}`, "limit.limit", 400},
		{"empty key", `{"key": "", "limit": {"limit": 1, "period": "1s"}}`, "limit", 400},
		{"negative cost", `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "cost": -1}`, "cost", 400},
		{"bad period", `{"key": "k", "limit": {"limit": 1, "period": "soon"}}`, "limit.period", 400},
		{"zero period", `{"key": "k", "limit": {"limit": 1, "period": "0s"}}`, "limit.period", 400},
		{"unknown algorithm", `{"key": "k", "limit": {"algorithm": "leaky", "limit": 1, "period": "1s"}}`, "limit.algorithm", 400},
		{"missing limit", `{"key": "k"}`, "limit", 400},
		{"both forms", `{"key": "k", "limit": {"limit": 1, "period": "1s"}, "domain": "api"}`, "body", 400},
		{"no descriptors", `{"domain": "api", "descriptors": []}`, "descriptors", 400},
		{"empty domain", `{"domain": "", "descriptors": [{"entries": [{"key": "user", "value": "1"}]}]}`, "domain", 400},
		{"empty entries", `{"domain": "api", "descriptors": [{"entries": []}]}`, "descriptors[0].entries", 400},
		{"empty entry key", `{"domain": "api", "descriptors": [{"entries": [{"key": "", "value": "1"}]}]}`, "descriptors[0].entries[0].key", 400},
		{"negative hits", `{"domain": "api", "hits": -2, "descriptors": [{"entries": [{"key": "user", "value": "1"}]}]}`, "hits", 400},
		{"trailing data", `{"key": "k", "limit": {"limit": 1, "period": "1s"}} {}`, "body", 400},
		{"concurrency inline", `{"key": "k", "limit": {"algorithm": "concurrency", "limit": 1, "period": "1s"}}`, "limit.algorithm", 400},
		{"too large", `{"key": "` + strings.Repeat("k", httpapi.MaxBodyBytes) + `"}`, "body", 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, out := post(t, h, "/v1/allow", tc.body)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d: %v", resp.StatusCode, tc.status, out)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			if out["field"] != tc.field && !(tc.name == "empty key" && out["field"] == "key") {
				t.Errorf("field %v, want %q: %v", out["field"], tc.field, out)
			}
		})
	}
}

// downStore fails every call.
type downStore struct{}

func (downStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("%w: connection refused", floodgate.ErrStore)
}

func TestFailureModes(t *testing.T) {
	yaml := `
domain: api
descriptors:
  - key: open
    rate_limit: {unit: second, requests_per_unit: 1, failure_mode: fail_open}
  - key: closed
    rate_limit: {unit: second, requests_per_unit: 1, failure_mode: fail_closed}
`
	srv, _ := newServer(t, downStore{}, yaml)
	h := servertest.Handler(t, srv, nil)
	resp, out := post(t, h, "/v1/allow", `{"domain": "api", "descriptors": [{"entries": [{"key": "open", "value": "1"}]}]}`)
	if resp.StatusCode != http.StatusOK || out["allowed"] != true {
		t.Errorf("fail_open: %d %v", resp.StatusCode, out)
	}
	resp, out = post(t, h, "/v1/allow", `{"domain": "api", "descriptors": [{"entries": [{"key": "closed", "value": "1"}]}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable || out["allowed"] != false || resp.Header.Get("Retry-After") == "" {
		t.Errorf("fail_closed: %d %v %v", resp.StatusCode, out, resp.Header)
	}
}

// slowStore answers only when its context ends.
type slowStore struct{}

func (slowStore) Apply(ctx context.Context, _ floodgate.Request) (floodgate.Decision, error) {
	<-ctx.Done()
	return floodgate.Decision{}, ctx.Err()
}

func TestStoreDeadline(t *testing.T) {
	srv, err := server.New(server.Options{Store: slowStore{}, Limiter: floodgate.Options{Timeout: 5 * time.Millisecond, FailurePolicy: floodgate.FailClosed}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := srv.DecideInline(context.Background(), "k", floodgate.Limit{Limit: 1, Period: time.Second}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(st.Err, context.DeadlineExceeded) || st.Code != server.OverLimit {
		t.Errorf("status %+v, want a deadline error denied by fail_closed", st)
	}
}

func TestConfigEndpointAndHealth(t *testing.T) {
	srv, _ := newServer(t, nil, apiYAML)
	h := servertest.Handler(t, srv, nil)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/v1/config": `"id":"api|user"`, "/metrics": "floodgate_config_rules 6"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d, body lacks %q:\n%s", path, rec.Code, want, rec.Body)
		}
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(apiYAML)
	srv, _ := newServer(t, nil, "")
	r, err := server.NewReloader(srv, dir)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Config().Domain("api") == nil {
		t.Fatal("domain api not loaded")
	}
	write(strings.Replace(apiYAML, "domain: api", "domain: api2", 1))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if srv.Config().Domain("api2") == nil || srv.Config().Domain("api") != nil {
		t.Fatal("reload did not swap the config")
	}
	write("domain: api3\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "api.yaml:4") {
		t.Fatalf("bad config: err = %v, want one naming api.yaml:4", err)
	}
	if srv.Config().Domain("api2") == nil {
		t.Fatal("a bad config replaced the good one")
	}
	rec := httptest.NewRecorder()
	servertest.Handler(t, srv, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{`floodgate_config_reloads_total{result="failure"} 1`, `floodgate_config_reloads_total{result="success"} 2`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestWatchReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(file, []byte(apiYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, nil, "")
	r, err := server.NewReloader(srv, dir)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(domain string) {
		t.Helper()
		tmp := filepath.Join(dir, ".api.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(strings.Replace(apiYAML, "domain: api", "domain: "+domain, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	// A change made before the watch starts raises no event the watcher
	// can see; Watch finds it by the files' fingerprint.
	replace("early")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-r.Watching():
	case err := <-done:
		t.Fatalf("Watch: %v", err)
	}
	waitFor(t, 10*time.Second, func() bool { return srv.Config().Domain("early") != nil })
	if srv.Config().Domain("early") == nil {
		t.Fatal("a change made before Watch was not loaded within 10s")
	}
	// Once Watching is closed, one write is enough.
	replace("watched")
	waitFor(t, 10*time.Second, func() bool { return srv.Config().Domain("watched") != nil })
	if srv.Config().Domain("watched") == nil {
		t.Fatal("the watcher did not reload within 10s")
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() && time.Now().Before(end) {
		<-tick.C
	}
}

// TestWatchSurvivesDirectoryReplaced: the config directory removed and
// made again (what some deployment tools do), and a Kubernetes ConfigMap
// update (the ..data symbolic link swapped to a new directory of files),
// are both reloaded, and edits after them too.
func TestWatchSurvivesDirectoryReplaced(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	write := func(dir, domain string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(strings.Replace(apiYAML, "domain: api", "domain: "+domain, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A ConfigMap's layout: config/..2026_1/api.yaml, config/..data ->
	// ..2026_1, config/api.yaml -> ..data/api.yaml.
	write(filepath.Join(dir, "..2026_1"), "first")
	if err := os.Symlink("..2026_1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "api.yaml"), filepath.Join(dir, "api.yaml")); err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, nil, "")
	r, err := server.NewReloader(srv, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	<-r.Watching()
	if srv.Config().Domain("first") == nil {
		t.Fatal("the ConfigMap's first version is not loaded")
	}
	// The ConfigMap update: a new directory, then ..data swapped to it by
	// a rename of a new link over the old one.
	write(filepath.Join(dir, "..2026_2"), "second")
	if err := os.Symlink("..2026_2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return srv.Config().Domain("second") != nil })
	if srv.Config().Domain("second") == nil {
		t.Fatal("the ConfigMap update was not loaded within 10s")
	}
	// The directory removed and made again, then edited.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	write(dir, "third")
	waitFor(t, 10*time.Second, func() bool { return srv.Config().Domain("third") != nil })
	if srv.Config().Domain("third") == nil {
		t.Fatal("the recreated directory was not loaded within 10s")
	}
	write(dir, "fourth")
	waitFor(t, 10*time.Second, func() bool { return srv.Config().Domain("fourth") != nil })
	if srv.Config().Domain("fourth") == nil {
		t.Fatal("an edit in the recreated directory was not reloaded within 10s: the watch was lost")
	}
}
