package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

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
