package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/middleware/httplimit"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// BenchmarkWait is a request through the middleware on the memory store,
// one GCRA limit with room to spare, without MaxWait (a decision) and
// with it (a slot that is now: a reservation and its commit, nothing
// sleeps).
func BenchmarkWait(b *testing.B) {
	for _, tc := range []struct {
		name    string
		maxWait time.Duration
	}{{"wait=none", 0}, {"wait=now", time.Second}} {
		b.Run(tc.name, func(b *testing.B) {
			store := memstore.New(&memstore.Options{SweepInterval: -1})
			b.Cleanup(func() { store.Close() })
			limiter, err := floodgate.New(store, &floodgate.Options{Timeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			m, err := httplimit.New(httplimit.Config{
				Limiter: limiter,
				Limits:  []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 1_000_000, Period: time.Second, Burst: 1_000_000}},
				Key:     func(*http.Request) string { return "k" },
				MaxWait: tc.maxWait,
			})
			if err != nil {
				b.Fatal(err)
			}
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			req := httptest.NewRequest("GET", "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
