package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

const hostileYAML = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: ip
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// series counts the series of a metric.
func series(t *testing.T, srv *server.Server, name string) int {
	t.Helper()
	mfs, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// TestMetricLabelsBounded: no label value comes from a request unless the
// config opts in, and then it is capped. A hundred thousand invented
// domains (the flood) add one series, not a hundred thousand; a detailed_metric rule makes at most
// server.MaxDetailedSeries series, and a megabyte of value makes a label
// of at most a few hundred bytes.
func TestMetricLabelsBounded(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, hostileYAML)})
	if err != nil {
		t.Fatal(err)
	}
	before := series(t, srv, "floodgate_decisions_total")
	for i := range 100_000 {
		if _, err := srv.Decide(t.Context(), fmt.Sprintf("invented-%d", i), []server.Descriptor{{Entries: []config.Entry{{Key: "user", Value: "1"}}}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := series(t, srv, "floodgate_decisions_total") - before; got > 1 {
		t.Errorf("100,000 invented domains made %d series, want at most 1", got)
	}
	for i := range server.MaxDetailedSeries + 500 {
		if _, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "ip", Value: fmt.Sprint(i)}}}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	huge := strings.Repeat("x", 1<<20-100)
	if _, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "ip", Value: huge}}}}, 1); err != nil {
		t.Fatal(err)
	}
	mfs, _ := srv.Registry().Gather()
	n, longest := 0, 0
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				longest = max(longest, len(l.GetValue()))
				if l.GetName() == "rule" && strings.HasPrefix(l.GetValue(), "api.ip") || l.GetValue() == "api|ip_overflow" {
					n++
				}
			}
		}
	}
	// Two outcomes (allowed, denied) per value at most, plus the overflow.
	if n > 2*server.MaxDetailedSeries+2 {
		t.Errorf("a detailed_metric rule made %d series, want at most %d", n, 2*server.MaxDetailedSeries+2)
	}
	if longest > 300 {
		t.Errorf("the longest label value is %d bytes, want at most 300", longest)
	}
}

// TestOverlongKeyIsBadInput: a descriptor value long enough to make a key
// over floodgate.MaxKeyLen is the caller's mistake, answered as such and
// never by the failure mode (fail_open would let every such request
// through).
func TestOverlongKeyIsBadInput(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, hostileYAML),
		Limiter: floodgate.Options{FailurePolicy: floodgate.FailOpen}})
	if err != nil {
		t.Fatal(err)
	}
	// Escaping triples '%', so 350 KB of them make a key over 1 MiB.
	value := strings.Repeat("%", 350_000)
	_, err = srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "user", Value: "ok"}}}, {Entries: []config.Entry{{Key: "user", Value: value}}}}, 1)
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	if !ok || fe.Field != "descriptors[1].key" || !errors.Is(err, floodgate.ErrInvalidRequest) {
		t.Fatalf("Decide with a key over the maximum: %v, want an invalid request naming descriptors[1].key", err)
	}
	res, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "user", Value: "ok"}}}}, 1)
	if err != nil || res.Statuses[0].Decision.Remaining != 4 {
		t.Errorf("after the rejected request: %+v, %v; want the first request of user=ok to take 1 of 5 (nothing taken before)", res, err)
	}
}

// TestInvalidUTF8IsBadInput: /v1/allow refuses invalid UTF-8 as POST /json
// does, instead of reading it as U+FFFD, which would make keys that differ
// only there share one budget.
func TestInvalidUTF8IsBadInput(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, hostileYAML)})
	if err != nil {
		t.Fatal(err)
	}
	h := servertest.Handler(t, srv, nil)
	for _, path := range []string{"/v1/allow", "/v1/reservations"} {
		body := "{\"key\": \"user:\xff\", \"limit\": {\"limit\": 1, \"period\": \"1m\"}}"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "UTF-8") {
			t.Errorf("%s with invalid UTF-8: %d %s, want 400", path, rec.Code, rec.Body)
		}
	}
}

// TestStoreOutageLogsBounded: a store that fails every call, under a
// thousand decisions, logs about one warning per rule a second (each
// saying how many it held back), not one per descriptor.
func TestStoreOutageLogsBounded(t *testing.T) {
	var buf syncBuffer
	srv, err := server.New(server.Options{Store: downStore{}, Config: parseConfig(t, hostileYAML), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 1000 {
		if _, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "user", Value: fmt.Sprint(i)}}}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	seconds := int(time.Since(start)/time.Second) + 1
	if n := strings.Count(buf.String(), "store failed"); n < 1 || n > seconds+1 {
		t.Errorf("%d warnings in %d s for 1000 failed descriptors of one rule, want 1 to %d", n, seconds, seconds+1)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestConcurrencyRuleRefused: a descriptor that matches a rule with
// algorithm concurrency is refused, naming the rule, where it used to be
// accepted and not enforced (4 of 4 held requests admitted against a
// limit of 2).
func TestConcurrencyRuleRefused(t *testing.T) {
	d, err := config.Parse("api.yaml", []byte("domain: api\ndescriptors:\n  - key: job\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "job", Value: "x"}}}}, 1)
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	if !ok || fe.Field != "descriptors[0]" || !strings.Contains(fe.Problem, "api|job") || !strings.Contains(fe.Problem, "concurrency") {
		t.Errorf("Decide on a concurrency rule: %v, want an invalid request naming the rule", err)
	}
}

// keyedFailure is a store whose failures name the key, as the Redis
// store's do, around a cause.
type keyedFailure struct{ cause error }

func (k keyedFailure) Apply(_ context.Context, r floodgate.Request) (floodgate.Decision, error) {
	return floodgate.Decision{}, fmt.Errorf("store: fixed_window %s: %w: %w", r.Key, floodgate.ErrStore, k.cause)
}

// TestStoreFailureLogsNoValues: a store failure's warning names the rule
// and the cause, never the descriptor's values, which the store's error
// carries in its key.
func TestStoreFailureLogsNoValues(t *testing.T) {
	for _, cause := range []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")},
		fmt.Errorf("%w: 0 of 1 acknowledged within 50ms", errors.New("not replicated")),
		context.DeadlineExceeded,
	} {
		var buf syncBuffer
		srv, err := server.New(server.Options{Store: keyedFailure{cause}, Config: parseConfig(t, hostileYAML), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Decide(t.Context(), "api", []server.Descriptor{{Entries: []config.Entry{{Key: "user", Value: "alice@example.com"}}}}, 1); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		if strings.Contains(out, "alice") || !strings.Contains(out, "store failed") || !strings.Contains(out, cause.Error()) {
			t.Errorf("warning for %v:\n%s\nwant the cause, without the value", cause, out)
		}
	}
}

// TestMaxOwnPeriod: a limit a request brings may not keep its keys longer
// than Options.MaxOwnPeriod (31 days by default); the config's rules may.
func TestMaxOwnPeriod(t *testing.T) {
	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Config: parseConfig(t, hostileYAML)})
	if err != nil {
		t.Fatal(err)
	}
	h := servertest.Handler(t, srv, nil)
	for _, tc := range []struct {
		path, body, field string
	}{
		{"/v1/allow", `{"key": "k", "limit": {"limit": 5, "period": "745h"}}`, "limit.period"},
		{"/v1/reservations", `{"key": "k", "limit": {"limit": 5, "period": "8760h"}}`, "limit.period"},
		{"/v1/leases", `{"key": "k", "limit": {"algorithm": "concurrency", "limit": 5, "period": "745h"}}`, "limit.period"},
		{"/v1/reservations", `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "u"}], "limit": {"limit": 5, "period": "745h"}}]}`, "descriptors[0].limit.period"},
	} {
		resp, body := post(t, h, tc.path, tc.body)
		if resp.StatusCode != http.StatusBadRequest || body["field"] != tc.field {
			t.Errorf("%s %s: %d %v, want 400 naming %s", tc.path, tc.body, resp.StatusCode, body, tc.field)
		}
	}
	if resp, body := post(t, h, "/v1/allow", `{"key": "k", "limit": {"limit": 5, "period": "744h"}}`); resp.StatusCode != http.StatusOK {
		t.Errorf("an inline limit of 31 days: %d %v, want 200", resp.StatusCode, body)
	}
}
