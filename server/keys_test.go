package server_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/store/memstore"
)

// countingObserver counts events; a func field makes it a type that ==
// cannot compare, which Watch's stop must not need.
type countingObserver struct {
	n    *atomic.Int64
	keep func()
}

func (o countingObserver) Observe(floodgate.Event) { o.n.Add(1) }

func TestWatch(t *testing.T) {
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	lim := floodgate.Limit{Limit: 10, Period: time.Minute}
	decide := func() {
		t.Helper()
		if _, err := srv.DecideInline(t.Context(), "k", lim, 1); err != nil {
			t.Fatal(err)
		}
	}
	var a, b atomic.Int64
	stopA := srv.Watch(countingObserver{n: &a, keep: func() {}})
	stopB := srv.Watch(countingObserver{n: &b, keep: func() {}})
	decide()
	stopA()
	stopA() // twice is harmless
	decide()
	stopB()
	decide()
	if a.Load() != 1 || b.Load() != 2 {
		t.Errorf("watchers saw %d and %d decisions, want 1 and 2", a.Load(), b.Load())
	}
}
