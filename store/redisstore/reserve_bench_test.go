package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkReserve measures a reservation's two steps beside a plain
// decision against a local redis-server, as memstore's BenchmarkReserve
// does: 10k keys visited in turn, one goroutine, the server's clock.
// op=allow is one Apply; op=reserve+commit is a Reserve of 4 units and a
// Commit of 1 (two scripts and a hold kept for its retention), reported
// per pair; release=true also indexes the hold for the sweep (one more
// script per pair); call=evalsha or fcall (Options.Functions). It
// reports roundtrips/op and server-µs/op as BenchmarkAllow does.
func BenchmarkReserve(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	stores := make(map[string]*Store)
	for _, call := range []string{"evalsha", "fcall"} {
		s, err := New(c, &Options{Prefix: "bench", HoldSweep: -1, Functions: call == "fcall"})
		if err != nil {
			b.Fatal(err)
		}
		stores[call] = s
	}
	keys := benchKeys(10_000)
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.GCRA} {
		l := benchLimit(alg)
		for _, op := range []string{"allow", "reserve+commit", "reserve+commit/release=true"} {
			for _, call := range []string{"evalsha", "fcall"} {
				s := stores[call]
				b.Run(fmt.Sprintf("alg=%s/op=%s/call=%s", alg, op, call), func(b *testing.B) {
					b.ReportAllocs()
					before, beforeUsec := scriptStats(b, c)
					i := 0
					for b.Loop() {
						key := keys[i%len(keys)]
						i++
						if op == "allow" {
							if _, err := s.Apply(ctx, floodgate.Request{Key: key, Limit: l, Cost: 1}); err != nil {
								b.Fatal(err)
							}
							continue
						}
						id := fmt.Sprintf("r%d-%d", time.Now().UnixNano(), i)
						r := floodgate.HoldRequest{Requests: []floodgate.Request{{Key: key, Limit: l, Cost: 4}}, ID: id, TTL: time.Minute, Release: op != "reserve+commit"}
						if _, err := s.Reserve(ctx, r); err != nil {
							b.Fatal(err)
						}
						if _, err := s.Settle(ctx, floodgate.SettleRequest{Requests: []floodgate.Request{{Key: key, Limit: l}}, ID: id, Actual: 1}); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					calls, usec := scriptStats(b, c)
					b.ReportMetric(float64(calls-before)/float64(b.N), "roundtrips/op")
					b.ReportMetric(float64(usec-beforeUsec)/float64(b.N), "server-µs/op")
				})
			}
		}
	}
}
