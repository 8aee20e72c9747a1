package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/ledger/sqlite"
)

const paidYAML = `
domain: billing
descriptors:
  - key: tenant
    rate_limit:
      name: monthly
      unit: day
      requests_per_unit: 100
      durable: true
`

// TestServeLedger is the paid-quota setup end to end: floodgate serve on
// the memory store with an SQLite ledger and a durable rule; reservations
// through the HTTP API are committed into the ledger, the ledger's health
// and metrics are served, and a restart of serve, which loses every
// counter of the memory store, goes on from the ledger's units instead of
// a full quota.
func TestServeLedger(t *testing.T) {
	dir, _ := writeConfig(t, paidYAML)
	path := filepath.Join(t.TempDir(), "ledger.db")
	args := []string{"-config", dir, "-ledger", path}
	in := startServe(t, args...)
	reserve := func(in *instance, cost int) (int, string) {
		t.Helper()
		body := `{"domain":"billing","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits":` + itoa(cost) + `}`
		resp, err := http.Post(in.httpURL+"/v1/reservations", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			ID      string `json:"id"`
			Allowed bool   `json:"allowed"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !out.Allowed {
			return resp.StatusCode, ""
		}
		return resp.StatusCode, out.ID
	}
	commit := func(in *instance, id string, cost int) {
		t.Helper()
		resp, err := http.Post(in.httpURL+"/v1/reservations/"+id+"/commit", "application/json", strings.NewReader(`{"cost":`+itoa(cost)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("commit: %d", resp.StatusCode)
		}
	}
	for range 3 {
		_, id := reserve(in, 30)
		if id == "" {
			t.Fatal("a reserve of 30 was denied below the quota")
		}
		commit(in, id, 20)
	}
	if resp, body := in.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz with the ledger up: %d %s", resp.StatusCode, body)
	}
	if got := in.metric(t, `floodgate_ledger_entries_total{outcome="written"}`); got != 3 {
		t.Errorf("floodgate_ledger_entries_total written = %d, want 3", got)
	}
	for series, want := range map[string]int64{
		`floodgate_reservations_total{result="held",step="reserve"}`:   3,
		`floodgate_reservations_total{result="settled",step="commit"}`: 3,
		`floodgate_ledger_writes_total{result="ok"}`:                   3,
	} {
		if got := in.metric(t, series); got != want {
			t.Errorf("%s = %d, want %d", series, got, want)
		}
	}
	if code := in.stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}

	// A new serve: its memory store is empty, the ledger holds 60.
	in = startServe(t, args...)
	if _, id := reserve(in, 41); id != "" {
		t.Fatal("41 units reserved after the restart with 60 of 100 committed: the counter was not rebuilt from the ledger")
	}
	_, id := reserve(in, 40)
	if id == "" {
		t.Fatal("40 units denied after the restart with 60 of 100 committed")
	}
	commit(in, id, 40)
	if code := in.stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	lg, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	u, err := lg.Report(t.Context(), ledgerQuery())
	if err != nil {
		t.Fatal(err)
	}
	if len(u) != 1 || u[0].Units != 100 || u[0].Entries != 4 {
		t.Errorf("the ledger holds %+v, want one window of 100 units in 4 entries", u)
	}
}

// TestServeLedgerConfig: a durable rule without -ledger is refused at
// start, naming the file, line and flag.
func TestServeLedgerConfig(t *testing.T) {
	dir, _ := writeConfig(t, paidYAML)
	var stderr syncBuffer
	code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-config", dir}, &syncBuffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "edge.yaml:4") || !strings.Contains(stderr.String(), "-ledger") {
		t.Errorf("serve of a durable rule without -ledger: exit %d, stderr:\n%s", code, stderr.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func ledgerQuery() ledger.Query { return ledger.Query{} }

// TestServeLedgerDrift: with -ledger-reconcile, serve compares the
// counters in Redis with the ledger and exports the drift: after Redis
// loses a durable counter (FLUSHALL) the committed units show as behind,
// until the next reserve rebuilds the counter from the ledger.
func TestServeLedgerDrift(t *testing.T) {
	redis := redistest.Standalone(t)
	dir, _ := writeConfig(t, paidYAML)
	in := startServe(t, "-config", dir, "-redis", "redis://"+redis.Addr, "-ledger", filepath.Join(t.TempDir(), "ledger.db"),
		"-ledger-reconcile", "50ms", "-timeout", "2s")
	body := `{"domain":"billing","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits":30}`
	reserveCommit := func() {
		t.Helper()
		resp, err := http.Post(in.httpURL+"/v1/reservations", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			ID      string `json:"id"`
			Allowed bool   `json:"allowed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || !out.Allowed {
			t.Fatalf("reserve: %+v, %v", out, err)
		}
		resp, err = http.Post(in.httpURL+"/v1/reservations/"+out.ID+"/commit", "application/json", strings.NewReader(`{"cost":30}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reserveCommit()
	// In step: no drift once a reconcile has run.
	defer func() {
		if t.Failed() {
			_, mb := in.get(t, "/metrics")
			t.Log(grepLines(string(mb), "ledger_"), in.stderr.String())
		}
	}()
	waitUntil(t, 10*time.Second, func() bool {
		return in.metric(t, `floodgate_ledger_reconciles_total{result="ok"}`) > 0 && in.metric(t, `floodgate_ledger_drift_units{direction="behind"}`) == 0
	})
	redis.MustCLI(t, "FLUSHALL")
	waitUntil(t, 10*time.Second, func() bool {
		return in.metric(t, `floodgate_ledger_drift_units{direction="behind"}`) == 30 && in.metric(t, `floodgate_ledger_drift_windows{direction="behind"}`) == 1
	})
	reserveCommit() // rebuilds the counter: 30 from the ledger, then 30 more
	waitUntil(t, 10*time.Second, func() bool {
		return in.metric(t, `floodgate_ledger_drift_units{direction="behind"}`) == 0
	})
}
