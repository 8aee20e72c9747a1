package redisstore

import (
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/linearize"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// TestLinearizableWaits is TestLinearizableReservations with every
// reserve a wait of up to 50 ms (Limiter.Schedule) at 6 per 100 ms (3
// units of debt), on a real Redis, standalone (EVALSHA and FCALL) and
// Cluster: the queue, a token bucket's debt and the cancels that give it
// back are linearizable against the algorithm package's Reserve (under
// the limit the Limiter sends), Settle and Step.
func TestLinearizableWaits(t *testing.T) {
	standalone := standaloneAddr(t)
	var cluster []string
	if !testing.Short() {
		cluster = redistest.StartCluster(t).Addrs()
	}
	for _, topology := range []string{"standalone", "functions", "cluster"} {
		if topology == "cluster" && cluster == nil {
			continue
		}
		for i, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(topology+"/"+string(alg), func(t *testing.T) {
				client := newRueidis(t, standalone)
				if topology == "cluster" {
					client = newRueidisCluster(t, cluster)
				}
				s, err := New(client, &Options{Prefix: testPrefix(t), Functions: topology == "functions"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				linearize.RunReserve(t, linearize.ReserveWorkload{
					Store: s, Limit: floodgate.Limit{Algorithm: alg, Limit: 6, Period: 100 * time.Second, Burst: 2},
					Keys: []string{"a", "b"}, Clients: 4, Calls: 60, Seed: uint64(i), Step: time.Second, MaxWait: 50 * time.Second,
				})
			})
		}
	}
}
