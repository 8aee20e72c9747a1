package ui

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// BenchmarkDashboard measures what the dashboard costs the decisions of
// a server on the memory store (where a decision is cheapest, so the
// share is largest): off, or on with its observer counting every
// decision. load=allowed is decisions far from their limits (the
// observer only looks); load=denied is one hot key denied every time (a
// locked sketch update each); load=denied-churn is 100,000 keys each
// denied (every update evicts a counter: the sketch's worst case). Besides
// ns/op it reports cpu-ns/op, the process's CPU time per decision, which
// a shared machine disturbs far less.
//
//	go test -run '^$' -bench BenchmarkDashboard -benchtime 1s -count 10 -cpu 1,2 ./server/ui/
func BenchmarkDashboard(b *testing.B) {
	for _, load := range []string{"allowed", "denied", "denied-churn"} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("load=%s/dashboard=%s", load, map[bool]string{false: "off", true: "on"}[on]), func(b *testing.B) {
				benchDecide(b, load, on)
			})
		}
	}
}

func benchDecide(b *testing.B, load string, on bool) {
	cfg := servertest.Config(b, "api.yaml", `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: user
    value: hot
    rate_limit: {unit: hour, requests_per_unit: 1}
`)
	store := memstore.New(&memstore.Options{MaxKeys: -1})
	b.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Options{Store: store, Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	if on {
		dash := New(srv, nil)
		b.Cleanup(dash.Close)
	}
	const keys = 100_000
	names := make([]string, keys)
	for i := range names {
		names[i] = "u" + strconv.Itoa(i)
	}
	never := floodgate.Limit{Limit: 0, Period: time.Minute}
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpuStart, cpuOK := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		ds := []server.Descriptor{{Entries: []config.Entry{{Key: "user"}}}}
		for pb.Next() {
			i := next.Add(1)
			switch load {
			case "allowed":
				ds[0].Entries[0].Value = names[i%keys]
			case "denied":
				ds[0].Entries[0].Value = "hot"
			case "denied-churn":
				if _, err := srv.DecideInline(b.Context(), names[i%keys], never, 1); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if _, err := srv.Decide(b.Context(), "api", ds, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	if end, ok := cpuTime(); ok && cpuOK && b.N > 0 {
		// The CPU the process spent per decision: the figure the on/off
		// comparison rests on, since the machine may be shared.
		b.ReportMetric(float64(end-cpuStart)/float64(b.N), "cpu-ns/op")
	}
}
