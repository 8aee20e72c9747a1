package ledgertest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ledger"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// BenchmarkDurable measures a durable quota's commit end to end, through
// a floodgate.Limiter on the memory store, beside the same steps on a
// quota that is not durable, one sub-benchmark each, with one caller and
// with 16 (b.RunParallel):
//
//   - op=allow: AllowN of a plain fixed window, a decision alone;
//   - op=reserve-commit: Reserve then Commit, not durable;
//   - op=durable: Reserve then Commit of a durable quota on a new ledger
//     from newLedger (ledger.Durable with o, the store under ledger.Wrap):
//     the commit waits for the ledger, and concurrent commits are written
//     together.
//
// Each reports commits/s (decisions/s for op=allow) beside ns/op; the
// durable ones also writes/op, the ledger writes per commit (below 1 when
// commits share writes).
func BenchmarkDurable(b *testing.B, newLedger func(b *testing.B) ledger.Store, o *ledger.DurableOptions) {
	quota := floodgate.Limit{Limit: floodgate.MaxLimit, Period: 30 * day}
	for _, callers := range []int{1, 16} {
		for _, op := range []string{"allow", "reserve-commit", "durable"} {
			b.Run(fmt.Sprintf("op=%s/callers=%d", op, callers), func(b *testing.B) {
				s := memstore.New(nil)
				defer s.Close()
				var store floodgate.Store = s
				lim := quota
				var acc *ledger.Accounts
				if op == "durable" {
					acc = ledger.Durable(newLedger(b), o)
					q, err := ledger.Wrap(s, acc, nil)
					if err != nil {
						b.Fatal(err)
					}
					store, lim.Durable = q, true
				}
				l, err := floodgate.New(store, nil)
				if err != nil {
					b.Fatal(err)
				}
				var keys atomic.Int64
				one := func() {
					key := fmt.Sprintf("tenant:%d", keys.Add(1)%1000)
					if op == "allow" {
						if d, err := l.AllowN(b.Context(), key, lim, 1); err != nil || !d.Allowed {
							b.Fatalf("AllowN: %+v, %v", d, err)
						}
						return
					}
					res, d, err := l.Reserve(b.Context(), key, lim, 2, &floodgate.ReserveOptions{TTL: time.Minute})
					if err != nil || !d.Allowed {
						b.Fatalf("Reserve: %+v, %v", d, err)
					}
					if _, err := res.Commit(b.Context(), 1); err != nil {
						b.Fatalf("Commit: %v", err)
					}
				}
				b.ReportAllocs()
				start := time.Now()
				var n atomic.Int64
				if callers == 1 {
					for b.Loop() {
						one()
						n.Add(1)
					}
				} else {
					b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							one()
							n.Add(1)
						}
					})
				}
				unit := "commits/s"
				if op == "allow" {
					unit = "decisions/s"
				}
				b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), unit)
				if acc != nil && n.Load() > 0 {
					b.ReportMetric(float64(acc.Stats().Writes)/float64(n.Load()), "writes/op")
				}
			})
		}
	}
}
