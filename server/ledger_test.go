package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// downLedger is a ledger that cannot be reached.
type downLedger struct{}

var errLedgerDown = errors.New("connection refused")

func (downLedger) Record(context.Context, []ledger.Commit) error { return errLedgerDown }
func (downLedger) Used(context.Context, string, floodgate.Limit, time.Time) (time.Time, int64, error) {
	return time.Time{}, 0, errLedgerDown
}
func (downLedger) Ping(context.Context) error { return errLedgerDown }

// wrapLedger is s with its durable quotas accounted in downLedger.
func wrapLedger(t *testing.T, s floodgate.Store, o *ledger.WrapOptions) floodgate.Store {
	t.Helper()
	q, err := ledger.Wrap(s, downLedger{}, o)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestReadyLedger: an unreachable ledger makes the server unready under
// the default ledger policy, and ready with the reason under fail_open.
func TestReadyLedger(t *testing.T) {
	for _, c := range []struct {
		policy floodgate.FailurePolicy
		ready  bool
	}{{"", false}, {floodgate.FailClosed, false}, {floodgate.FailOpen, true}} {
		s := memstore.New(nil)
		srv, err := server.New(server.Options{Store: wrapLedger(t, s, &ledger.WrapOptions{Policy: c.policy})})
		if err != nil {
			t.Fatal(err)
		}
		status, err := srv.Status(t.Context())
		switch {
		case c.ready && (err != nil || !strings.Contains(status, "ledger unreachable")):
			t.Errorf("policy %q: Status = %q, %v; want ready, naming the ledger", c.policy, status, err)
		case !c.ready && (err == nil || !strings.Contains(err.Error(), "ledger unreachable")):
			t.Errorf("policy %q: Status = %q, %v; want unready, naming the ledger", c.policy, status, err)
		}
		s.Close()
	}
}

// TestDecideLedgerDown: a durable rule whose ledger is down is denied on
// every decision path, whatever the failure mode (fail_open here): the
// HTTP API answers 503 with ledger_error, not store_error; Decide, which
// Envoy's gRPC answers from, says OVER_LIMIT with the ledger's error.
func TestDecideLedgerDown(t *testing.T) {
	d, err := config.Parse("billing.yaml", []byte("domain: billing\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: day, requests_per_unit: 100, durable: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		t.Fatal(err)
	}
	s := memstore.New(nil)
	defer s.Close()
	srv, err := server.New(server.Options{Store: wrapLedger(t, s, nil), Config: cfg, Limiter: floodgate.Options{FailurePolicy: floodgate.FailOpen}})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"domain": "billing", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}]}`
	resp, out := post(t, servertest.Handler(t, srv, nil), "/v1/allow", body)
	if resp.StatusCode != http.StatusServiceUnavailable || out["allowed"] != false || out["ledger_error"] != true || out["store_error"] == true {
		t.Errorf("POST /v1/allow with the ledger down: %d %v, want 503 with ledger_error", resp.StatusCode, out)
	}
	res, err := srv.Decide(t.Context(), "billing", []server.Descriptor{{Entries: []config.Entry{{Key: "tenant", Value: "acme"}}}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Code != server.OverLimit || !errors.Is(res.Statuses[0].Err, ledger.ErrLedger) {
		t.Errorf("Decide with the ledger down: %+v, want OVER_LIMIT with ErrLedger", res)
	}
	resp, out = post(t, servertest.Handler(t, srv, nil), "/v1/reservations", body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(out["detail"]), "ledger failed") {
		t.Errorf("POST /v1/reservations with the ledger down: %d %v, want 503 naming the ledger", resp.StatusCode, out)
	}
}
