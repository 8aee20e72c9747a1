package floodgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stepClock is a clock that moves only when told (the package's own tests
// cannot import floodgatetest, which imports this package).
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

type nopStore struct{}

func (nopStore) Apply(context.Context, Request) (Decision, error) {
	return Decision{Allowed: true}, nil
}

// TestFallbackOneProbePerInterval: past the probe interval, however many
// goroutines race through useLocal and report a failure, exactly one of
// them probes: the failed probe opens the breaker again before another
// can claim the probe (the clock never moves, so the interval never
// passes again).
func TestFallbackOneProbePerInterval(t *testing.T) {
	clock := &stepClock{}
	clock.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	for round := range 50 {
		f, err := newFallback(&Options{Local: nopStore{}, Instances: 2, ProbeInterval: time.Minute, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		down := fmt.Errorf("%w: dial tcp: connection refused", ErrStore)
		f.report(down) // open until now + 1 min
		clock.ns.Add(int64(time.Minute))
		var probes atomic.Int64
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				<-gate
				for range 200 {
					if !f.useLocal() {
						probes.Add(1)
						f.report(down)
					}
				}
			})
		}
		close(gate)
		wg.Wait()
		if n := probes.Load(); n != 1 {
			t.Fatalf("round %d: %d probes in one interval, want 1", round, n)
		}
	}
}
