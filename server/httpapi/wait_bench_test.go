//go:build unix

package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/httpapi"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// discard is a ResponseWriter that keeps only the status, so that a
// benchmark counts the handler's allocations and not a recorder's.
type discard struct {
	h      http.Header
	status int
}

func (w *discard) Header() http.Header         { return w.h }
func (w *discard) Write(b []byte) (int, error) { return len(b), nil }
func (w *discard) WriteHeader(status int)      { w.status = status }

// cpuNow is the CPU time this process has used, user and system: per
// operation it counts what the handler costs, much less the time other
// processes of a shared machine held the CPU.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAllowWait is POST /v1/allow on the memory store, inline GCRA
// over 100k keys with room to spare, without max_wait_ms (a decision) and
// with it (wait=now: a slot that is now, so nothing sleeps; the cost of
// a wait is the reservation, its commit and the hold's bookkeeping).
func BenchmarkAllowWait(b *testing.B) {
	for _, tc := range []struct{ name, body string }{
		{"wait=none", `{"key":"user:%d","limit":{"algorithm":"gcra","limit":1000000,"period":"1s","burst":1000000}}`},
		{"wait=now", `{"key":"user:%d","limit":{"algorithm":"gcra","limit":1000000,"period":"1s","burst":1000000},"max_wait_ms":1000}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			store := memstore.New(&memstore.Options{SweepInterval: -1})
			b.Cleanup(func() { store.Close() })
			srv := servertest.New(b, "api.yaml", apiYAML, server.Options{Store: store, Limiter: floodgate.Options{Timeout: time.Second}})
			api, err := httpapi.New(srv, nil)
			if err != nil {
				b.Fatal(err)
			}
			h := api.Handler(nil)
			w := &discard{h: http.Header{}}
			var body []byte
			rd := bytes.NewReader(nil)
			req, err := http.NewRequest(http.MethodPost, "/v1/allow", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			cpu := cpuNow()
			for b.Loop() {
				i++
				body = bytes.Replace(append(body[:0], tc.body...), []byte("%d"), strconv.AppendInt(nil, int64(i%100_000), 10), 1)
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
