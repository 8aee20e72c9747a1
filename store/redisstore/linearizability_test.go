package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/internal/linearize"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The linearizability tests record histories of concurrent Apply calls on
// a real Redis, from several stores with clients of their own, and check
// them with porcupine against the algorithm package (internal/linearize).
// CI runs them as they are; FLOODGATE_LINEARIZE_LONG=1 makes every history
// four times longer (four times the periods and the calls per key) and
// repeats it three times:
//
//	FLOODGATE_LINEARIZE_LONG=1 go test -race -count=1 -run 'Linearizab' -v ./store/redisstore/

// linearizeScale is the number of rounds, and the factor of the periods a
// history spans and of its calls per key.
func linearizeScale() (rounds, factor int) {
	if os.Getenv("FLOODGATE_LINEARIZE_LONG") == "1" {
		return 3, 4
	}
	return 1, 1
}

// linearizeStores returns n stores over n rueidis clients of their own.
// Every other store coalesces after a single run in flight (Coalesce 1),
// so that with three callers per store (linearizeCallers), two of them
// often wait together and share a script run (multi.lua); the others keep
// the default, under which three callers always run scripts of their own.
func linearizeStores(t *testing.T, n int, prefix string, newClient func() rueidis.Client) []floodgate.Store {
	t.Helper()
	stores := make([]floodgate.Store, n)
	for i := range stores {
		coalesce := 0
		if i%2 == 1 {
			coalesce = 1
		}
		s, err := New(newClient(), &Options{Prefix: prefix, Coalesce: coalesce})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	return stores
}

// linearizeCallers is the callers of a history: three per store of
// linearizeStores(t, 4, ...).
const linearizeCallers = 12

// coalesceStats adds up the CoalesceStats of stores.
func coalesceStats(stores []floodgate.Store) CoalesceStats {
	var st CoalesceStats
	for _, s := range stores {
		c := s.(*Store).CoalesceStats()
		st.Runs += c.Runs
		st.Decisions += c.Decisions
	}
	return st
}

// coalesced is a Workload.Until: the history goes on, within its bounds,
// until some calls shared a script run. How often callers overlap depends
// on the machine (on a Cluster, where calls share a run only on one key,
// a history of 450 calls shares 3 to 19 runs on 2 cores), so a history
// that happened to share none would otherwise fail checkCoalesced.
func coalesced(stores []floodgate.Store) func(*linearize.Recorder) bool {
	return func(*linearize.Recorder) bool { return coalesceStats(stores).Runs > 0 }
}

// checkCoalesced fails the test unless some calls of the history shared
// script runs, so that the history checked coalescing too.
func checkCoalesced(t *testing.T, stores []floodgate.Store) {
	t.Helper()
	st := coalesceStats(stores)
	if st.Runs == 0 {
		t.Error("no calls shared a script run: the history did not exercise coalescing")
	}
	t.Logf("%d shared script runs decided %d calls", st.Runs, st.Decisions)
}

// runLinearizable checks every algorithm on the Redis that newClient
// reaches, deciding by the server's clock: the model steps each call at
// the time its script read (Decision.Now), which must never go back for a
// key (Redis runs one script at a time) and must fall within the call (the
// server runs on this machine's clock).
func runLinearizable(t *testing.T, newClient func() rueidis.Client) {
	rounds, factor := linearizeScale()
	for i, c := range linearize.Cases {
		t.Run(c.Name, func(t *testing.T) {
			for round := range rounds {
				prefix := testPrefix(t)
				checkTTLsAtEnd(t, newClient(), prefix)
				stores := linearizeStores(t, 4, prefix, newClient)
				w := linearize.Workload{
					Stores:     stores,
					Goroutines: linearizeCallers,
					Limit:      c.Limit,
					Keys:       []string{"k1", "k2", "k3"},
					OpsPerKey:  150 * factor,
					MinPeriods: 5 * factor,
					Until:      coalesced(stores),
					Seed:       uint64(100*round + i),
				}
				rec := linearize.Record(t, w)
				if err := rec.CheckClock(2 * time.Millisecond); err != nil {
					t.Errorf("a decision's time is not the time of its call:\n%v", err)
				}
				linearize.Verify(t, rec, w.Limit, linearize.Options{Monotonic: true})
				checkCoalesced(t, w.Stores)
			}
		})
	}
}

func TestLinearizable(t *testing.T) {
	addr := standaloneAddr(t)
	runLinearizable(t, func() rueidis.Client { return newRueidis(t, addr) })
}

func TestLinearizableCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t).Addrs()
	runLinearizable(t, func() rueidis.Client { return newRueidisCluster(t, addrs) })
}

// TestLinearizableTimeouts gives a tenth of the calls a deadline of 100 µs,
// so that some fail before their script runs and some after: a failed call
// may or may not have counted, and the model allows both, nothing else.
// With the callers' clock (Request.Now) the model knows the time a failed
// call would have been decided at, for every algorithm; with the server's
// clock it enumerates the windows of an aligned fixed window.
//
// Calls with the long deadline fail too: rueidis, when a call that it sent
// alone on a connection times out, closes the connection and fails the
// calls that were about to use it with the same "context deadline
// exceeded". They may have counted as well, and the model treats them
// alike; the log reports how many there were.
func TestLinearizableTimeouts(t *testing.T) {
	addr := standaloneAddr(t)
	rounds, factor := linearizeScale()
	newClient := func() rueidis.Client { return newRueidis(t, addr) }
	type tc struct {
		name   string
		limit  floodgate.Limit
		ownNow bool
	}
	var cases []tc
	for _, c := range linearize.Cases {
		cases = append(cases, tc{c.Name + "/client_time", c.Limit, true})
	}
	cases = append(cases, tc{linearize.Cases[0].Name + "/server_time", linearize.Cases[0].Limit, false})
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := 0
			for round := range rounds {
				prefix := testPrefix(t)
				checkTTLsAtEnd(t, newClient(), prefix)
				stores := linearizeStores(t, 4, prefix, newClient)
				shared := coalesced(stores)
				w := linearize.Workload{
					Stores:       stores,
					Goroutines:   linearizeCallers,
					Limit:        c.limit,
					Keys:         []string{"k1", "k2"},
					OpsPerKey:    150 * factor,
					MinPeriods:   5 * factor,
					OwnNow:       c.ownNow,
					TimeoutShare: 0.1,
					Timeout:      100 * time.Microsecond,
					// Whether a 100 µs deadline ends a call depends on the
					// machine too: go on until one has.
					Until: func(rec *linearize.Recorder) bool { return shared(rec) && rec.Stats().Failed > 0 },
					Seed:  uint64(1000 + 100*round + i),
				}
				rec := linearize.Record(t, w)
				failed += linearize.Verify(t, rec, w.Limit, linearize.Options{Monotonic: !c.ownNow}).Failed
				checkCoalesced(t, w.Stores)
			}
			if failed == 0 {
				t.Errorf("no call failed: the short deadline did not exercise the failed-call path")
			}
		})
	}
}

// readThenWrite is a deliberately broken store: it reads a key's state
// with GET, decides in Go, and writes the new state back with SET, two
// round trips, so two callers that read the same state both take the
// same unit. It is what the Lua scripts exist to prevent, and the checker
// must catch it. It decides fixed_window and gcra by Request.Now.
type readThenWrite struct {
	c      rueidis.Client
	prefix string
}

func (b *readThenWrite) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	if err := r.Validate(); err != nil {
		return floodgate.Decision{}, err
	}
	key := b.prefix + ":" + string(r.Limit.Algorithm) + ":" + r.Key
	v, err := b.c.Do(ctx, b.c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		v, err = "0:0", nil
	}
	if err != nil {
		return floodgate.Decision{}, err
	}
	x, y, ok := strings.Cut(v, ":")
	a, errA := strconv.ParseInt(x, 10, 64)
	c, errC := strconv.ParseInt(y, 10, 64)
	if !ok || errA != nil || errC != nil {
		return floodgate.Decision{}, fmt.Errorf("%w: %q", floodgate.ErrUnexpectedReply, v)
	}
	p, now := r.Limit.Params(), r.Now.UnixMicro()
	var d algorithm.Decision
	switch r.Limit.Algorithm {
	case floodgate.FixedWindow:
		var s algorithm.FixedWindow
		s, d = algorithm.FixedWindow{Start: a, Count: c}.Step(p, now, r.Cost)
		a, c = s.Start, s.Count
	case floodgate.GCRA:
		var s algorithm.GCRA
		s, d = algorithm.GCRA{TAT: a, TATFrac: c}.Step(p, now, r.Cost)
		a, c = s.TAT, s.TATFrac
	default:
		return floodgate.Decision{}, fmt.Errorf("readThenWrite: %s is not implemented", r.Limit.Algorithm)
	}
	set := b.c.B().Set().Key(key).Value(strconv.FormatInt(a, 10) + ":" + strconv.FormatInt(c, 10)).Px(time.Minute).Build()
	if err := b.c.Do(ctx, set).Error(); err != nil {
		return floodgate.Decision{}, err
	}
	return floodgate.FromAlgorithm(d, now), nil
}

// TestLinearizableCatchesReadThenWrite shows the checker works: the same
// workload that the Redis store passes, run on readThenWrite, is Illegal.
// Eight callers on one key lose an update within a few dozen calls; the
// test allows up to five histories to show one, and reports how many it
// took. As a control, the same store with one caller, which cannot lose an
// update, must pass: the verdict is about the race, not the store's
// arithmetic.
func TestLinearizableCatchesReadThenWrite(t *testing.T) {
	addr := standaloneAddr(t)
	for _, c := range []linearize.Case{linearize.Cases[0], linearize.Cases[5]} {
		t.Run(c.Name, func(t *testing.T) {
			control := linearize.Workload{Stores: []floodgate.Store{&readThenWrite{c: newRueidis(t, addr), prefix: testPrefix(t)}},
				Limit: c.Limit, Keys: []string{"k"}, Goroutines: 1, OpsPerKey: 150, OwnNow: true}
			if res, _, err := linearize.Check(linearize.Record(t, control).Operations(), linearize.Options{}, 30*time.Second); err != nil || res != porcupine.Ok {
				t.Fatalf("one caller of the read-then-write store: %s, %v; want Ok", res, err)
			}
			const attempts = 5
			for attempt := 1; attempt <= attempts; attempt++ {
				prefix := testPrefix(t)
				stores := make([]floodgate.Store, 4)
				for i := range stores {
					stores[i] = &readThenWrite{c: newRueidis(t, addr), prefix: prefix}
				}
				w := linearize.Workload{Stores: stores, Limit: c.Limit, Keys: []string{"k"},
					Goroutines: 8, OpsPerKey: 150, OwnNow: true, Seed: uint64(attempt)}
				rec := linearize.Record(t, w)
				start := time.Now()
				res, _, err := linearize.Check(rec.Operations(), linearize.Options{}, 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("attempt %d: %d calls: %s in %v", attempt, rec.Stats().Calls, res, time.Since(start))
				switch res {
				case porcupine.Illegal:
					return
				case porcupine.Unknown:
					t.Fatalf("porcupine ran out of time")
				}
			}
			t.Errorf("%d histories of a read-then-write store were all found linearizable: the checker misses lost updates", attempts)
		})
	}
}

// TestLinearizableReservations checks with porcupine that concurrent
// reserves, commits, cancels and decisions (of live, settled and expired
// holds, retries and conflicts) on a real Redis, standalone and Cluster,
// are linearizable against the algorithm package's Reserve, Settle and
// Step, for every algorithm with reservations. Calls carry their own Now.
func TestLinearizableReservations(t *testing.T) {
	standalone := standaloneAddr(t)
	var cluster []string
	if !testing.Short() {
		cluster = redistest.StartCluster(t).Addrs()
	}
	for _, topology := range []string{"standalone", "cluster"} {
		if topology == "cluster" && cluster == nil {
			continue
		}
		for i, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindowLog, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(topology+"/"+string(alg), func(t *testing.T) {
				client := newRueidis(t, standalone)
				if topology == "cluster" {
					client = newRueidisCluster(t, cluster)
				}
				s, err := New(client, &Options{Prefix: testPrefix(t)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				linearize.RunReserve(t, linearize.ReserveWorkload{
					Store: s, Limit: floodgate.Limit{Algorithm: alg, Limit: 6, Period: 100 * time.Second},
					Keys: []string{"a", "b"}, Clients: 4, Calls: 60, Seed: uint64(i), Step: time.Second,
				})
			})
		}
	}
}
