//go:build unix

package httpapi_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// benchYAML is the rule of benchall's service rows: a billion a second
// per user, so that every decision is allowed.
const benchYAML = `
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

// BenchmarkAllowKeys is POST /v1/allow as benchall's HTTP rows on the
// memory store send it (`floodgate bench -http -keys N`: one descriptor
// user=<key>, the key drawn uniformly), through the handler serve builds
// (browser guard on) on a store bounded as serve's defaults bound it,
// and its sweeper running, at benchall's pace: the store's clock moves
// 1/12,000 s a decision, so that a key of 100k comes again about 8 s
// later, its one-second window long ended and most often swept, as in
// the benchall row. keys=1 is the hot key, "0". cpu-ns/op is the process's
// CPU time per decision.
func BenchmarkAllowKeys(b *testing.B) {
	for _, keys := range []int{1, 100_000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			clock := floodgatetest.NewFakeClock(start)
			store := memstore.New(&memstore.Options{Clock: clock, MaxKeys: 1_000_000, MaxBytes: 1 << 30, MaxHoldsPerKey: 100_000})
			b.Cleanup(func() { store.Close() })
			srv := servertest.New(b, "bench.yaml", benchYAML, server.Options{Store: store})
			api, err := httpapi.New(srv, &httpapi.Options{GuardBrowsers: true})
			if err != nil {
				b.Fatal(err)
			}
			h := api.Handler(nil)
			w := &discard{h: http.Header{}}
			rd := bytes.NewReader(nil)
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/v1/allow", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			rng := rand.New(rand.NewPCG(1, 2))
			var body []byte
			b.ReportAllocs()
			cpu := cpuNow()
			for b.Loop() {
				clock.Advance(time.Second / 12_000)
				body = append(body[:0], `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"`...)
				// As the load generator draws them: keys=1 sends "0".
				body = strconv.AppendInt(body, int64(rng.IntN(keys)), 10)
				body = append(body, `"}]}]}`...)
				rd.Reset(body)
				req.Body = io.NopCloser(rd)
				clear(w.h)
				w.status = 0
				h.ServeHTTP(w, req)
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
			b.ReportMetric(float64(cpuNow()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
