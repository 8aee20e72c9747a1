package httpapi_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestAllowRoute: Handler sends POST /v1/allow to its handler without the
// mux, and every request answers as through the mux alone (a Handler with
// an extra pattern of a host, which leaves every request to the mux):
// the same status, header and body for the route, its other methods and
// every other spelling of its path, with and without the browser guard.
func TestAllowRoute(t *testing.T) {
	handler := func(guard bool, extra map[string]http.Handler) http.Handler {
		clock := floodgatetest.NewFakeClock(start)
		store := memstore.New(&memstore.Options{Clock: clock})
		t.Cleanup(func() { store.Close() })
		srv := servertest.New(t, "api.yaml", apiYAML, server.Options{Store: store, Limiter: floodgate.Options{Clock: clock}})
		api, err := httpapi.New(srv, &httpapi.Options{GuardBrowsers: guard})
		if err != nil {
			t.Fatal(err)
		}
		return api.Handler(extra)
	}
	const inline = `{"key":"k","limit":{"limit":2,"period":"1m"}}`
	const descriptors = `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"42"}]}]}`
	reqs := []struct{ method, target, body string }{
		{"POST", "/v1/allow", inline}, {"POST", "/v1/allow", descriptors}, {"POST", "/v1/allow", inline},
		{"POST", "/v1/allow", inline}, {"POST", "/v1/allow", `{"key":1}`},
		{"GET", "/v1/allow", ""}, {"PUT", "/v1/allow", inline}, {"HEAD", "/v1/allow", ""},
		{"POST", "/v1/allow/", inline}, {"POST", "//v1/allow", inline}, {"POST", "/v1/./allow", inline},
		{"POST", "/v1/%61llow", inline}, {"POST", "/V1/allow", inline}, {"POST", "/v1/allow?x=1", descriptors},
		{"POST", "/v1/reset", inline}, {"POST", "/v1/allow", descriptors},
	}
	for _, guard := range []bool{false, true} {
		fast := handler(guard, nil)
		muxOnly := handler(guard, map[string]http.Handler{"GET nowhere.invalid/x": http.NotFoundHandler()})
		for _, rq := range reqs {
			var recs [2]*httptest.ResponseRecorder
			for i, h := range []http.Handler{fast, muxOnly} {
				r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(rq.body))
				r.Header.Set("Content-Type", "application/json")
				recs[i] = httptest.NewRecorder()
				h.ServeHTTP(recs[i], r)
			}
			g, w := recs[0], recs[1]
			if g.Code != w.Code || !reflect.DeepEqual(g.Header(), w.Header()) || !bytes.Equal(g.Body.Bytes(), w.Body.Bytes()) {
				t.Errorf("guard %v, %s %s: %d %v %s; through the mux %d %v %s", guard, rq.method, rq.target,
					g.Code, g.Header(), g.Body, w.Code, w.Header(), w.Body)
			}
		}
	}
}
