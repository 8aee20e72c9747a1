package limitchecktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/limitcheck"
	"github.com/floodgate-rl/floodgate/internal/limitcheck/limitchecktest"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// TestTimer: a Checker's wait on a Timer reports its delay to Next, lasts
// until a send on Fire, and ends on Stopped.
func TestTimer(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(store, &floodgate.Options{Clock: floodgatetest.NewFakeClock(now)})
	if err != nil {
		t.Fatal(err)
	}
	timer := limitchecktest.NewTimer()
	c := limitcheck.Checker{Limiter: lim, Limits: []floodgate.Limit{{Algorithm: floodgate.GCRA, Limit: 1, Period: time.Second, Burst: 1}},
		MaxWait: 2 * time.Second, After: timer.After}
	if err := c.Init("pkg", "call"); err != nil {
		t.Fatal(err)
	}
	if o := c.Check(t.Context(), "k", ""); !o.Decision.Allowed || o.Waited != 0 {
		t.Fatalf("first: %+v, want allowed at once", o)
	}
	done := make(chan limitcheck.Outcome, 1)
	go func() { done <- c.Check(context.Background(), "k", "") }()
	if d := timer.Next(t); d < time.Second || d > time.Second+2*time.Microsecond {
		t.Fatalf("Next: %v, want the slot 1 s ahead", d)
	}
	select {
	case o := <-done:
		t.Fatalf("ended before Fire: %+v", o)
	default:
	}
	timer.Fire <- now
	if o := <-done; !o.Decision.Allowed || o.Waited < time.Second {
		t.Fatalf("after Fire: %+v, want allowed after 1 s", o)
	}
	<-timer.Stopped
}
