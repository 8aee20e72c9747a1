package memstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/linearize"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestLinearizable checks with porcupine that concurrent calls on the
// memory store are linearizable against the algorithm package, for every
// algorithm: the same check the Redis store passes, here proving the model
// on the store that runs the model's own code. memstore reads its clock
// before it takes a key's lock, so a key's steps may go back in time; the
// check allows that (linearize.Options.Monotonic is off). Its clock ticks a
// tenth of a period at every reading, so windows roll over every few calls.
func TestLinearizable(t *testing.T) {
	t.Parallel()
	for i, c := range linearize.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			clock := &linearize.TickClock{Start: time.Unix(1_800_000_000, 0), Step: c.Limit.Period / 10}
			s := memstore.New(&memstore.Options{Clock: clock})
			t.Cleanup(func() { s.Close() })
			linearize.Run(t, linearize.Workload{
				Stores: []floodgate.Store{s},
				Limit:  c.Limit,
				Keys:   []string{"a", "b", fmt.Sprintf("{%d}", i)},
				Seed:   uint64(i),
				// The clock moves on with calls, not with waiting.
				Unpaced: true,
			}, linearize.Options{})
		})
	}
}

// TestLinearizableReservations checks with porcupine that concurrent
// reserves, commits, cancels (of live, settled and expired holds, and
// retries) and decisions on a few keys are linearizable against the
// algorithm package's Reserve, Settle and Step, for every algorithm with
// reservations.
func TestLinearizableReservations(t *testing.T) {
	t.Parallel()
	for i, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			s := memstore.New(&memstore.Options{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			linearize.RunReserve(t, linearize.ReserveWorkload{
				Store: s, Limit: floodgate.Limit{Algorithm: alg, Limit: 6, Period: 100 * time.Second},
				Keys: []string{"a", "b"}, Clients: 4, Calls: 60, Seed: uint64(i), Step: time.Second,
			})
		})
	}
}
