package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newLimiter(t *testing.T, store floodgate.Store, policy floodgate.FailurePolicy) (*floodgate.Limiter, *floodgatetest.FakeClock) {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	l, err := floodgate.New(store, &floodgate.Options{Clock: clock, FailurePolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func memStore(t *testing.T) *memstore.Store {
	s := memstore.New(&memstore.Options{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

// ok is the handler behind the middleware: it answers 200 "ok" and
// counts its calls.
type ok struct{ calls int }

func (h *ok) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls++
	io.WriteString(w, "ok")
}

func newHandler(t *testing.T, c httplimit.Config) (http.Handler, *ok) {
	t.Helper()
	m, err := httplimit.New(c)
	if err != nil {
		t.Fatal(err)
	}
	next := &ok{}
	return m.Handler(next), next
}

// do sends a GET from addr to h.
func do(h http.Handler, addr string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.RemoteAddr = addr
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func problem(t *testing.T, w *httptest.ResponseRecorder) httplimit.Problem {
	t.Helper()
	if got := w.Header().Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", got)
	}
	if got := w.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	var p httplimit.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p.Status != w.Code {
		t.Errorf("problem status %d, response %d", p.Status, w.Code)
	}
	return p
}

func TestTooManyRequests(t *testing.T) {
	t.Parallel()
	limiter, clock := newLimiter(t, memStore(t), "")
	h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 2, Period: time.Minute}}})
	clock.Advance(20 * time.Second)

	for i, wantR := range []string{`"default";r=1;t=40`, `"default";r=0;t=40`} {
		w := do(h, "192.0.2.1:1000")
		if w.Code != 200 || w.Body.String() != "ok" {
			t.Fatalf("request %d: %d %q, want 200 ok", i, w.Code, w.Body)
		}
		if got := w.Header().Get("RateLimit"); got != wantR {
			t.Errorf("request %d: RateLimit = %s, want %s", i, got, wantR)
		}
		if got, want := w.Header().Get("RateLimit-Policy"), `"default";q=2;w=60`; got != want {
			t.Errorf("request %d: RateLimit-Policy = %s, want %s", i, got, want)
		}
		if _, ok := w.Header()["Retry-After"]; ok {
			t.Errorf("request %d: Retry-After on a 200", i)
		}
	}
	clock.Advance(500 * time.Millisecond)
	w := do(h, "192.0.2.1:1000")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d, want 429", w.Code)
	}
	if next.calls != 2 {
		t.Errorf("next called %d times, want 2", next.calls)
	}
	// 39.5 s left in the window: both rounded up.
	if got, want := w.Header().Get("Retry-After"), "40"; got != want {
		t.Errorf("Retry-After = %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"default";r=0;t=40`; got != want {
		t.Errorf("RateLimit = %q, want %q", got, want)
	}
	want := httplimit.Problem{Type: "https://iana.org/assignments/http-problem-types#quota-exceeded", Title: "Quota Exceeded",
		Status: 429, Detail: "Retry after 40 seconds.", ViolatedPolicies: []string{"default"}}
	if got := problem(t, w); !reflect.DeepEqual(got, want) {
		t.Errorf("problem = %+v, want %+v", got, want)
	}

	// Another client has its own budget.
	if w := do(h, "192.0.2.2:1000"); w.Code != 200 {
		t.Errorf("another client: %d, want 200", w.Code)
	}
	// The window ends.
	clock.Advance(40 * time.Second)
	if w := do(h, "192.0.2.1:1000"); w.Code != 200 {
		t.Errorf("next window: %d, want 200", w.Code)
	}
}

func TestHead(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 0, Period: time.Minute}}})
	r := httptest.NewRequest("HEAD", "/", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 429 || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d bytes, want 429 without a body", w.Code, w.Body.Len())
	}
}

func TestNever(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 0, Period: time.Minute}}})
	w := do(h, "192.0.2.1:1")
	if w.Code != 429 {
		t.Fatalf("%d, want 429", w.Code)
	}
	if _, ok := w.Header()["Retry-After"]; ok {
		t.Errorf("Retry-After %q for a request that can never pass", w.Header().Get("Retry-After"))
	}
	if p := problem(t, w); p.Detail != "The request exceeds the quota and can never be admitted." {
		t.Errorf("detail %q", p.Detail)
	}
}

func TestSeveralLimits(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	limits := []floodgate.Limit{{Limit: 10, Period: time.Second}, {Limit: 2, Period: time.Hour}}
	var results []httplimit.Result
	h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Report: func(_ *http.Request, res httplimit.Result) {
		results = append(results, res)
	}})
	for range 2 {
		if w := do(h, "192.0.2.1:1"); w.Code != 200 {
			t.Fatalf("%d, want 200", w.Code)
		}
	}
	w := do(h, "192.0.2.1:1")
	if w.Code != 429 {
		t.Fatalf("third: %d, want 429", w.Code)
	}
	// The hourly limit denied; the per-second one gave its unit back.
	if got, want := w.Header().Get("RateLimit"), `"10-per-1s";r=8;t=1, "2-per-3600s";r=0;t=3600`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	if got, want := problem(t, w).ViolatedPolicies, []string{"2-per-3600s"}; !reflect.DeepEqual(got, want) {
		t.Errorf("violated-policies = %q, want %q", got, want)
	}
	if len(results) != 3 || results[2].Decision.Allowed || results[2].Key != "ip:192.0.2.1" || len(results[2].Decisions) != 2 {
		t.Errorf("reported %+v", results)
	}
}

type downStore struct{}

var errDown = fmt.Errorf("%w: store down", floodgate.ErrStore)

func (downStore) Apply(context.Context, floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, errDown
}

func TestStoreFailure(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{{Limit: 10, Period: time.Second}}
	t.Run("fail open", func(t *testing.T) {
		limiter, _ := newLimiter(t, downStore{}, floodgate.FailOpen)
		var got httplimit.Result
		h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Report: func(_ *http.Request, res httplimit.Result) { got = res }})
		w := do(h, "192.0.2.1:1")
		if w.Code != 200 || next.calls != 1 {
			t.Fatalf("%d, next called %d times; want 200 and once", w.Code, next.calls)
		}
		if !errors.Is(got.Err, errDown) || got.Decisions != nil {
			t.Errorf("result %+v, want the store's error and no decisions", got)
		}
		if w.Header().Get("RateLimit-Policy") == "" || w.Header().Get("RateLimit") != "" {
			t.Errorf("header %v, want the policy and no state", w.Header())
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		limiter, _ := newLimiter(t, downStore{}, floodgate.FailClosed)
		h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits})
		w := do(h, "192.0.2.1:1")
		if w.Code != 503 || next.calls != 0 {
			t.Fatalf("%d, next called %d times; want 503 and never", w.Code, next.calls)
		}
		p := problem(t, w)
		if p.Type != "about:blank" || strings.Contains(w.Body.String(), "store down") {
			t.Errorf("problem %+v leaks or misnames the failure", p)
		}
		if w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
			t.Errorf("header %v: no state is known", w.Header())
		}
	})
	t.Run("local", func(t *testing.T) {
		// 10 per second over 4 instances: 2 each, decided in memory and
		// answered like any decision, 429 once the share is spent.
		limiter, err := floodgate.New(downStore{}, &floodgate.Options{
			Clock: floodgatetest.NewFakeClock(start), FailurePolicy: floodgate.FailLocal, Local: memStore(t), Instances: 4,
		})
		if err != nil {
			t.Fatal(err)
		}
		h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits})
		for i, want := range []struct {
			code  int
			field string
		}{{200, "r=1"}, {200, "r=0"}, {429, "r=0"}} {
			w := do(h, "192.0.2.1:1")
			if w.Code != want.code {
				t.Fatalf("request %d: %d, want %d", i, w.Code, want.code)
			}
			if got := w.Header().Get("RateLimit"); !strings.Contains(got, want.field) {
				t.Errorf("request %d: RateLimit %q, want %s of the local share", i, got, want.field)
			}
			if got := w.Header().Get("RateLimit-Policy"); !strings.Contains(got, "q=10") {
				t.Errorf("request %d: RateLimit-Policy %q, want the configured q=10", i, got)
			}
		}
		if next.calls != 2 {
			t.Errorf("next called %d times, want 2", next.calls)
		}
	})
	t.Run("fail closed in dry run", func(t *testing.T) {
		limiter, _ := newLimiter(t, downStore{}, floodgate.FailClosed)
		h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, DryRun: true})
		if w := do(h, "192.0.2.1:1"); w.Code != 200 {
			t.Errorf("%d, want 200", w.Code)
		}
	})
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	limits := []floodgate.Limit{{Limit: 1, Period: time.Minute}}
	key := httplimit.Header("X-Api-Key")
	t.Run("deny by default", func(t *testing.T) {
		limiter, _ := newLimiter(t, memStore(t), "")
		h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Key: key})
		w := do(h, "192.0.2.1:1")
		if w.Code != 400 || next.calls != 0 {
			t.Fatalf("%d, next called %d times; want 400 and never", w.Code, next.calls)
		}
		if p := problem(t, w); p.Detail != "The request carries no rate limit key." {
			t.Errorf("detail %q", p.Detail)
		}
		if w := do(h, "192.0.2.1:1", "X-Api-Key", "k1"); w.Code != 200 {
			t.Errorf("with a key: %d, want 200", w.Code)
		}
	})
	t.Run("allow", func(t *testing.T) {
		limiter, _ := newLimiter(t, memStore(t), "")
		h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Key: key, MissingKey: httplimit.AllowMissingKey})
		for range 3 {
			if w := do(h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != "" {
				t.Fatalf("%d %v, want 200 without fields", w.Code, w.Header())
			}
		}
		if next.calls != 3 {
			t.Errorf("next called %d times", next.calls)
		}
	})
	t.Run("shared", func(t *testing.T) {
		limiter, _ := newLimiter(t, memStore(t), "")
		h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Key: key, MissingKey: httplimit.SharedMissingKey})
		if w := do(h, "192.0.2.1:1"); w.Code != 200 {
			t.Fatalf("first anonymous: %d", w.Code)
		}
		if w := do(h, "192.0.2.2:1"); w.Code != 429 {
			t.Fatalf("second anonymous, another address: %d, want 429 (one shared budget)", w.Code)
		}
		if w := do(h, "192.0.2.2:1", "X-Api-Key", "k1"); w.Code != 200 {
			t.Errorf("with a key: %d, want 200", w.Code)
		}
	})
	t.Run("refused key", func(t *testing.T) {
		limiter, _ := newLimiter(t, memStore(t), "")
		long := func(*http.Request) string { return strings.Repeat("k", floodgate.MaxKeyLen+1) }
		h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, Key: long})
		w := do(h, "192.0.2.1:1")
		if w.Code != 400 {
			t.Fatalf("%d, want 400", w.Code)
		}
		if p := problem(t, w); p.Detail != "The request's rate limit key is not valid." {
			t.Errorf("detail %q", p.Detail)
		}
	})
}

func TestSkip(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	h, next := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 0, Period: time.Minute}},
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" }})
	r := httptest.NewRequest("GET", "/healthz", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || next.calls != 1 || w.Header().Get("RateLimit-Policy") != "" {
		t.Errorf("skipped: %d, %d calls, header %v", w.Code, next.calls, w.Header())
	}
	if w := do(h, "192.0.2.1:1"); w.Code != 429 {
		t.Errorf("not skipped: %d", w.Code)
	}
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	var reported []httplimit.Result
	var seen []httplimit.Result
	m, err := httplimit.New(httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 1, Period: time.Minute}}, DryRun: true,
		Report: func(_ *http.Request, res httplimit.Result) { reported = append(reported, res) }})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := httplimit.FromContext(r.Context())
		seen = append(seen, res)
	}))
	for range 2 {
		if w := do(h, "192.0.2.1:1"); w.Code != 200 {
			t.Fatalf("%d, want 200", w.Code)
		}
	}
	w := do(h, "192.0.2.1:1")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"default";r=0;`) {
		t.Errorf("RateLimit = %q: the fields tell the truth in a dry run", got)
	}
	if _, ok := w.Header()["Retry-After"]; ok {
		t.Errorf("Retry-After on a request let through")
	}
	if len(reported) != 3 || reported[0].DryRun || !reported[1].DryRun || reported[1].Decision.Allowed {
		t.Errorf("reported %+v, want the second and third as dry-run denials", reported)
	}
	if len(seen) != 3 || !seen[2].DryRun {
		t.Errorf("next saw %+v", seen)
	}
}

func TestDenyFunc(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 0, Period: time.Minute}},
		Deny: func(w http.ResponseWriter, r *http.Request, res httplimit.Result) {
			if w.Header().Get("RateLimit") == "" {
				t.Error("the fields are not set before Deny")
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "slow down")
		}})
	if w := do(h, "192.0.2.1:1"); w.Code != 503 || w.Body.String() != "slow down" {
		t.Errorf("%d %q", w.Code, w.Body)
	}
}

func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	limits := []floodgate.Limit{{Limit: 1, Period: time.Minute}}
	a, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, KeyPrefix: "a:"})
	b, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, KeyPrefix: "b:"})
	shared, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: limits, KeyPrefix: "a:"})
	if do(a, "192.0.2.1:1").Code != 200 || do(b, "192.0.2.1:1").Code != 200 {
		t.Errorf("two prefixes share a budget")
	}
	if do(shared, "192.0.2.1:1").Code != 429 {
		t.Errorf("one prefix, two budgets")
	}
}

func TestLegacyHeaders(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	h, _ := newHandler(t, httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 5, Period: time.Minute}},
		Headers: &ratelimitheader.Options{Legacy: true}})
	w := do(h, "192.0.2.1:1")
	if got := w.Header().Get("X-RateLimit-Limit") + " " + w.Header().Get("X-RateLimit-Remaining") + " " + w.Header().Get("X-RateLimit-Reset"); got != "5 4 60" {
		t.Errorf("legacy = %q, want 5 4 60", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	limiter, _ := newLimiter(t, memStore(t), "")
	ok := floodgate.Limit{Limit: 1, Period: time.Second}
	for _, tc := range []struct {
		name string
		c    httplimit.Config
		want string
	}{
		{"no limiter", httplimit.Config{Limits: []floodgate.Limit{ok}}, "nil Limiter"},
		{"no limits", httplimit.Config{Limiter: limiter}, "no Limits"},
		{"invalid limit", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Limit: 1}}}, "limits[0]: floodgate: invalid limit: period"},
		{"concurrency", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Algorithm: floodgate.Concurrency, Limit: 1, Period: time.Second}}}, "Acquire"},
		{"duplicate names", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{ok, ok}}, `"1-per-1s" is used twice`},
		{"bad name", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{{Name: "a\nb", Limit: 1, Period: time.Second}}}, "invalid policy name"},
		{"missing key", httplimit.Config{Limiter: limiter, Limits: []floodgate.Limit{ok}, MissingKey: 7}, "unknown MissingKey 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := httplimit.New(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
