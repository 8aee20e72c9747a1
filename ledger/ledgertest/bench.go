package ledgertest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/ledger"
)

// Benchmark measures a ledger, one sub-benchmark per operation, each on a
// new ledger from newLedger:
//
//   - op=record/batch=1: one commit per Record, one goroutine: the
//     latency of a durable commit;
//   - op=record/batch=64: 64 commits per Record, one goroutine;
//   - op=record/batch=1/callers=16: one commit per Record from 16
//     goroutines (b.RunParallel), as concurrent requests commit;
//   - op=usage: Usage of one of 1000 keys that hold 10 commits each in
//     the window: what rebuilding a lost counter reads.
//
// Each reports entries/s (entries written, or windows read, per second of
// the loop) beside ns/op, which is per Record or Usage call.
func Benchmark(b *testing.B, newLedger func(b *testing.B) ledger.Store) {
	q := quota(1_000_000_000, 30*day)
	window := ledger.WindowAt(q.Period, base).Start
	var ids atomic.Int64
	entries := func(n int) []ledger.Entry {
		es := make([]ledger.Entry, n)
		for i := range es {
			id := ids.Add(1)
			es[i] = ledger.Entry{Key: fmt.Sprintf("tenant:%d", id%1000), Limit: q, Window: window, Units: 1 + id%100,
				ID: fmt.Sprintf("r%d", id), At: base.Add(time.Duration(id) * time.Microsecond)}
		}
		return es
	}
	record := func(b *testing.B, s ledger.Store, es []ledger.Entry) {
		if _, err := s.Record(b.Context(), es); err != nil {
			b.Fatal(err)
		}
	}
	perSecond := func(b *testing.B, n int64) {
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
	}
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("op=record/batch=%d", batch), func(b *testing.B) {
			s := newLedger(b)
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				record(b, s, entries(batch))
				n += int64(batch)
			}
			perSecond(b, n)
		})
	}
	b.Run("op=record/batch=1/callers=16", func(b *testing.B) {
		s := newLedger(b)
		b.ReportAllocs()
		b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				record(b, s, entries(1))
				n.Add(1)
			}
		})
		perSecond(b, n.Load())
	})
	b.Run("op=usage", func(b *testing.B) {
		s := newLedger(b)
		for range 10 {
			es := entries(1000)
			for i := range es {
				es[i].Key = fmt.Sprintf("tenant:%d", i)
			}
			record(b, s, es)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			u, err := s.Usage(b.Context(), fmt.Sprintf("tenant:%d", i%1000), q.Period, base)
			if err != nil || u.Entries != 10 {
				b.Fatalf("Usage = %+v, %v; want 10 entries", u, err)
			}
			i++
		}
		perSecond(b, int64(i))
	})
}
