package httpapi_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// start is a calendar minute, so window arithmetic in tests is simple.
var start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// apiYAML is the rules of the fuzz targets (those of the server's tests).
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

// apiHandler is the HTTP API of a server of apiYAML on a memory store,
// on a fake clock at start.
func apiHandler(t testing.TB) http.Handler {
	t.Helper()
	clock := floodgatetest.NewFakeClock(start)
	store := memstore.New(&memstore.Options{Clock: clock})
	t.Cleanup(func() { store.Close() })
	srv := servertest.New(t, "api.yaml", apiYAML, server.Options{Store: store, Limiter: floodgate.Options{Clock: clock}})
	api, err := httpapi.New(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	instantHolds(api)
	return api.Handler(nil)
}

// instantHolds makes every held response's slot come at once: on a
// frozen clock, tests that are about the answer need not wait for it.
func instantHolds(api *httpapi.API) {
	httpapi.SetHoldTimer(api, func(time.Duration) (<-chan time.Time, func() bool) {
		c := make(chan time.Time, 1)
		c <- start
		return c, func() bool { return false }
	})
}

// tokenFile is a file of content, a token file.
func tokenFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
