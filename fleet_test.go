package floodgate_test

import (
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// fleet is three Limiters on clock over one store: memory, or a real
// Redis the test starts (three stores, each with its own connections),
// each made with opts (nil: none) and clock.
func fleet(t *testing.T, storeName string, clock *floodgatetest.FakeClock, opts *floodgate.Options) []*floodgate.Limiter {
	t.Helper()
	var stores []floodgate.Store
	if storeName == "memory" {
		m := memstore.New(&memstore.Options{SweepInterval: -1, Clock: clock})
		t.Cleanup(func() { m.Close() })
		stores = []floodgate.Store{m, m, m}
	} else {
		srv := redistest.Standalone(t)
		for range 3 {
			s, err := redisstore.Open(t.Context(), "redis://"+srv.Addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			stores = append(stores, s)
		}
	}
	var ls []*floodgate.Limiter
	for _, s := range stores {
		o := floodgate.Options{}
		if opts != nil {
			o = *opts
		}
		o.Clock = clock
		l, err := floodgate.New(s, &o)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}
