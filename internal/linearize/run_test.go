package linearize

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// bubbleClock is the clock of the synctest bubble it is read in.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time { return time.Now() }

// latent is a store whose every call takes latency.
type latent struct {
	floodgate.Store
	latency time.Duration
}

func (s latent) Apply(ctx context.Context, r floodgate.Request) (floodgate.Decision, error) {
	time.Sleep(s.latency) // the bubble's clock: what a call would cost on a slower machine
	return s.Store.Apply(ctx, r)
}

// TestRecordByTime records the workload of the Redis linearizability tests
// on machines of every speed: in a synctest bubble, whose clock moves only
// while every caller waits, a store that answers at once is a machine
// infinitely fast (the clock moves only by the callers' pacing), and one
// whose calls take longer than the pacing allows is a slow one. Either way
// the history must span its periods (Record fails the test if it does
// not) with about the calls planned: the length of a history is time, and
// its size must not grow with the machine's speed, or porcupine could not
// check it.
func TestRecordByTime(t *testing.T) {
	keys, opsPerKey := []string{"k1", "k2", "k3"}, 150
	planned := len(keys) * opsPerKey
	for _, tc := range []struct {
		name    string
		latency time.Duration
		ownNow  bool
	}{
		{"instant", 0, false},
		{"instant/client_time", 0, true},
		{"20µs", 20 * time.Microsecond, false},
		{"1ms", time.Millisecond, false},
		{"5ms", 5 * time.Millisecond, false}, // slower than the pacing: no caller waits
	} {
		for _, c := range Cases {
			t.Run(tc.name+"/"+c.Name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := memstore.New(&memstore.Options{Clock: bubbleClock{}, SweepInterval: -1})
					w := Workload{
						Stores:     []floodgate.Store{latent{s, tc.latency}},
						Limit:      c.Limit,
						Keys:       keys,
						Goroutines: 12,
						OpsPerKey:  opsPerKey,
						OwnNow:     tc.ownNow,
					}
					start := time.Now()
					rec := Record(t, w)
					took := time.Since(start)
					// Not Verify: in the bubble the calls of a burst share
					// their instants, so that porcupine would find them all
					// concurrent, as they never are on a real clock.
					calls := rec.Stats().Calls
					if periods := float64(rec.Span()) / float64(w.Limit.Period); periods < 5 {
						t.Errorf("the history spans %.1f periods, want at least 5", periods)
					}
					// Paced callers pass the span within two bursts of their
					// last planned call: on time, or behind and not waiting.
					if most := planned + 2*burst*w.Goroutines; calls < planned || calls > most {
						t.Errorf("%d calls, want %d to %d: the history's size follows the machine's speed", calls, planned, most)
					}
					t.Logf("%d calls over %v of the bubble's time", calls, took)
				})
			})
		}
	}
}

// TestRecordUntil checks that the callers go on past their planned calls
// and the span until Workload.Until holds, and stop soon after.
func TestRecordUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(&memstore.Options{Clock: bubbleClock{}, SweepInterval: -1})
		const goroutines, planned, want = 12, 450, 600
		w := Workload{
			Stores:     []floodgate.Store{s},
			Limit:      Cases[0].Limit,
			Keys:       []string{"k1", "k2", "k3"},
			Goroutines: goroutines,
			OpsPerKey:  planned / 3,
			Until:      func(rec *Recorder) bool { return rec.Stats().Calls >= want },
		}
		rec := Record(t, w)
		// Each caller asks Until after its own call: the others may each
		// be making one more.
		if calls := rec.Stats().Calls; calls < want || calls > want+goroutines {
			t.Errorf("%d calls, want %d to %d", calls, want, want+goroutines)
		}
		if periods := float64(rec.Span()) / float64(w.Limit.Period); periods < 5 {
			t.Errorf("the history spans %.1f periods, want at least 5", periods)
		}
	})
}
