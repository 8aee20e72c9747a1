package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/floodgate-rl/floodgate/internal/servertest"
)

const benchYAML = `
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

// discardWriter is a ResponseWriter that keeps only the status, so that a
// benchmark counts the handler's allocations and not a recorder's.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// BenchmarkAllow runs POST /v1/allow through Handler on the memory store,
// in the descriptor form benchall's HTTP rows send (one descriptor, 100k
// keys) and the inline form, without a network: the handler's own CPU and
// allocations per decision (decoding, the decision, metrics, headers and
// the encoded answer).
func BenchmarkAllow(b *testing.B) {
	for _, form := range []struct{ name, body string }{
		{"descriptors", `{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"%d"}]}]}`},
		{"inline", `{"key":"user:%d","limit":{"limit":1000000000,"period":"1s"}}`},
	} {
		b.Run(form.name, func(b *testing.B) {
			srv, _ := newServer(b, nil, benchYAML)
			h := servertest.Handler(b, srv, nil)
			w := &discardWriter{h: http.Header{}}
			var body []byte
			rd := bytes.NewReader(nil)
			req, err := http.NewRequest(http.MethodPost, "/v1/allow", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				body = bytes.Replace(append(body[:0], form.body...), []byte("%d"), strconv.AppendInt(nil, int64(i%100_000), 10), 1)
				rd.Reset(body)
				req.Body = io.NopCloser(rd)
				clear(w.h)
				w.status = 0
				h.ServeHTTP(w, req)
				if w.status != 0 && w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
