package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// downLedger is a ledger that cannot be reached.
type downLedger struct{}

var errLedgerDown = errors.New("connection refused")

func (downLedger) Record(context.Context, []floodgate.Commit) error { return errLedgerDown }
func (downLedger) Used(context.Context, string, floodgate.Limit, time.Time) (time.Time, int64, error) {
	return time.Time{}, 0, errLedgerDown
}
func (downLedger) Ping(context.Context) error { return errLedgerDown }

// TestReadyLedger: an unreachable ledger makes the server unready under
// the default ledger policy, and ready with the reason under fail_open.
func TestReadyLedger(t *testing.T) {
	for _, c := range []struct {
		policy floodgate.FailurePolicy
		ready  bool
	}{{"", false}, {floodgate.FailClosed, false}, {floodgate.FailOpen, true}} {
		s := memstore.New(nil)
		srv, err := server.New(server.Options{Store: s, Limiter: floodgate.Options{Ledger: downLedger{}, LedgerPolicy: c.policy}})
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
