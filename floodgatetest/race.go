package floodgatetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/floodgate-rl/floodgate"
)

// testRace is the test of the design doc: ten clients race for the last
// five allowances of a limit and exactly five get one, for every
// algorithm, round after round on fresh keys. The five that win see
// Remaining 4, 3, 2, 1 and 0: the store decided them one after another.
func (s *suite) testRace(t *testing.T) {
	t.Parallel()
	const (
		limit   = 8
		taken   = 3
		clients = 10
	)
	for _, alg := range floodgate.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			t.Parallel()
			l := s.limit(t, lim(alg, limit, still))
			lease := func(id string) string {
				if alg == floodgate.Concurrency {
					return id
				}
				return ""
			}
			for round := range rounds(50) {
				key := s.key(t, fmt.Sprint(round))
				now := s.at(0)
				first := floodgate.Request{Key: key, Limit: l, Cost: taken, Now: now, Lease: lease("first")}
				if d := s.apply(t, first); !d.Allowed || d.Remaining != limit-taken {
					t.Fatalf("round %d: Apply(%s) = %+v, want allowed with %d remaining", round, describe(first), d, limit-taken)
				}
				var (
					start = make(chan struct{})
					wg    sync.WaitGroup
					ds    [clients]floodgate.Decision
					errs  [clients]error
				)
				for i := range clients {
					wg.Go(func() {
						r := floodgate.Request{Key: key, Limit: l, Cost: 1, Now: now, Lease: lease(fmt.Sprintf("c%d", i))}
						<-start
						ds[i], errs[i] = s.tryApply(t.Context(), r)
					})
				}
				close(start)
				wg.Wait()
				var won []int64
				for i := range clients {
					if errs[i] != nil {
						t.Fatalf("round %d: client %d: %v", round, i, errs[i])
					}
					if ds[i].Allowed {
						won = append(won, ds[i].Remaining)
					}
				}
				slices.Sort(won)
				if want := []int64{0, 1, 2, 3, 4}; !slices.Equal(won, want) {
					t.Fatalf("round %d: %d of %d clients won the last %d allowances, seeing Remaining %v; want %d, seeing %v",
						round, len(won), clients, limit-taken, won, len(want), want)
				}
			}
		})
	}
}

// testManyKeys runs many goroutines on many keys of every algorithm, all
// at one instant, and checks each key against what the model allows: with
// cost 1, a key admits exactly min(capacity, attempts); with random costs,
// it admits at most its capacity and denies a cost only if it did not fit
// in what is left at the end. A final peek sees what was taken.
func (s *suite) testManyKeys(t *testing.T) {
	t.Parallel()
	const (
		goroutines = 8
		keys       = 500
		capacity   = 10
	)
	ops := rounds(2000)
	limits := make([]floodgate.Limit, len(floodgate.Algorithms))
	for i, alg := range floodgate.Algorithms {
		limits[i] = s.limit(t, lim(alg, capacity, still))
	}
	type tally struct {
		attempts, admitted int64
		minDenied          int64 // the smallest cost denied, or 0
	}
	tallies := make([][keys]tally, goroutines)
	keyName := func(k int) string { return s.key(t, fmt.Sprint(k)) }
	limitOf := func(k int) floodgate.Limit { return limits[k%len(limits)] }
	randomCost := func(k int) bool { return k/len(limits)%2 == 1 }
	now := s.at(0)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			for i := range ops {
				k := rng.IntN(keys)
				r := floodgate.Request{Key: keyName(k), Limit: limitOf(k), Cost: 1, Now: now}
				if randomCost(k) {
					r.Cost = rng.Int64N(4)
				}
				if r.Limit.Algorithm == floodgate.Concurrency && r.Cost > 0 {
					r.Lease = fmt.Sprintf("g%di%d", g, i)
				}
				d, err := s.tryApply(t.Context(), r)
				if err != nil {
					t.Errorf("Apply(%s): %v", describe(r), err)
					return
				}
				tl := &tallies[g][k]
				tl.attempts++
				switch {
				case d.Allowed:
					tl.admitted += r.Cost
				case r.Cost == 0:
					t.Errorf("Apply(%s) denied a peek below the limit: %+v", describe(r), d)
					return
				case tl.minDenied == 0 || r.Cost < tl.minDenied:
					tl.minDenied = r.Cost
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for k := range keys {
		var sum tally
		for g := range goroutines {
			tl := tallies[g][k]
			sum.attempts += tl.attempts
			sum.admitted += tl.admitted
			if tl.minDenied != 0 && (sum.minDenied == 0 || tl.minDenied < sum.minDenied) {
				sum.minDenied = tl.minDenied
			}
		}
		l := limitOf(k)
		if !randomCost(k) {
			if want := min(capacity, sum.attempts); sum.admitted != want {
				t.Errorf("key %d (%s): admitted %d of %d attempts of cost 1, want %d", k, l, sum.admitted, sum.attempts, want)
			}
		} else {
			if sum.admitted > capacity {
				t.Errorf("key %d (%s): admitted %d units, above the capacity %d", k, l, sum.admitted, capacity)
			}
			// A denied cost c did not fit in what was left then, which is at
			// least what is left at the end (nothing is given back at one
			// instant), so c > capacity - admitted. Cost 0 always fits.
			if sum.minDenied != 0 && sum.minDenied <= capacity-sum.admitted {
				t.Errorf("key %d (%s): denied a cost of %d while %d of %d units were never taken",
					k, l, sum.minDenied, capacity-sum.admitted, capacity)
			}
		}
		r := floodgate.Request{Key: keyName(k), Limit: l, Now: now}
		if d := s.apply(t, r); d.Remaining != capacity-sum.admitted {
			t.Errorf("key %d (%s): a peek after admitting %d units sees Remaining %d, want %d",
				k, l, sum.admitted, d.Remaining, capacity-sum.admitted)
		}
	}
}
