package memstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/linearize"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestLinearizableWaits is TestLinearizableReservations with every
// reserve a wait of up to 50 ms (3 units of debt) (Limiter.Schedule) at 6 per 100 ms: the
// queue, a token bucket's debt and the cancels that give it back are
// linearizable against the algorithm package's Reserve (under the limit
// the Limiter sends), Settle and Step.
func TestLinearizableWaits(t *testing.T) {
	t.Parallel()
	for i, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			s := memstore.New(&memstore.Options{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			linearize.RunReserve(t, linearize.ReserveWorkload{
				Store: s, Limit: floodgate.Limit{Algorithm: alg, Limit: 6, Period: 100 * time.Second, Burst: 2},
				Keys: []string{"a", "b"}, Clients: 4, Calls: 60, Seed: uint64(i), Step: time.Second, MaxWait: 50 * time.Second,
			})
		})
	}
}
