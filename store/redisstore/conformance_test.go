package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The conformance suite, floodgatetest.Run, on every topology and through
// both client libraries: with the callers' time (every request carries its
// Now, so the suite checks exact decisions) and with the Redis server's
// TIME (the suite checks what does not depend on the time). After each run,
// every key the suite left has a TTL.

func runConformance(t *testing.T, check func(t *testing.T), newStore func(t *testing.T) *Store) {
	for _, mode := range []struct {
		name string
		opts floodgatetest.Options
	}{
		{"client_time", floodgatetest.Options{}},
		{"server_time", floodgatetest.Options{ServerTime: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			floodgatetest.Run(t, func(t *testing.T) floodgate.Store { return newStore(t) }, mode.opts)
		})
	}
	check(t)
}

func TestConformanceStandalone(t *testing.T) {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	check := func(t *testing.T) { checkTTLs(t, c, "") }
	t.Run("rueidis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := New(newRueidis(t, addr), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
	t.Run("goredis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := NewGoRedis(newGoRedis(t, addr), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t).Addrs()
	c := newRueidisCluster(t, addrs)
	check := func(t *testing.T) { checkTTLs(t, c, "") }
	t.Run("rueidis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := Open(t.Context(), "redis-cluster://"+strings.Join(addrs, ","), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("goredis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			gr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { gr.Close() })
			s, err := NewGoRedis(gr, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}

func TestConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel set")
	}
	// No failover during the run: one would lose counts, and on a loaded
	// machine a master can stall past the default second.
	d := redistest.StartSentinel(t, redistest.WithDownAfter(time.Minute))
	c := newRueidis(t, d.Master.Addr)
	check := func(t *testing.T) { checkTTLs(t, c, "") }
	t.Run("rueidis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := Open(t.Context(), "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("goredis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			gr := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.MasterName, SentinelAddrs: d.SentinelAddrs(), MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { gr.Close() })
			s, err := NewGoRedis(gr, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		})
	})
}
