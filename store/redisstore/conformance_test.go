package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

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

// runConformanceBoth runs the suite through rueidis (a store viaRueidis
// makes with opts) and through go-redis (NewGoRedis with opts over the
// client viaGoRedis makes). Each store is closed when its test ends.
func runConformanceBoth(t *testing.T, check func(t *testing.T), opts *Options,
	viaRueidis func(t *testing.T, opts *Options) (*Store, error), viaGoRedis func(t *testing.T) redis.UniversalClient) {
	t.Run("rueidis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := viaRueidis(t, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("goredis", func(t *testing.T) {
		runConformance(t, check, func(t *testing.T) *Store {
			s, err := NewGoRedis(viaGoRedis(t), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// conformanceStandalone runs the suite on a standalone Redis with opts and
// returns a client of it.
func conformanceStandalone(t *testing.T, opts *Options) rueidis.Client {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	runConformanceBoth(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) { return New(newRueidis(t, addr), opts) },
		func(t *testing.T) redis.UniversalClient { return newGoRedis(t, addr) })
	return c
}

// conformanceCluster runs the suite on cl with opts and returns a client
// of it.
func conformanceCluster(t *testing.T, cl *redistest.Cluster, opts *Options) rueidis.Client {
	addrs := cl.Addrs()
	c := newRueidisCluster(t, addrs)
	runConformanceBoth(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) {
			return Open(t.Context(), "redis-cluster://"+strings.Join(addrs, ",")+"?dial_timeout="+testDialTimeout.String(), opts)
		},
		func(t *testing.T) redis.UniversalClient {
			gr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: testDialTimeout})
			t.Cleanup(func() { gr.Close() })
			return gr
		})
	return c
}

// conformanceSentinel runs the suite on a Sentinel set with opts and
// returns a client of its master. No failover happens during the run: one
// would lose counts, and on a loaded machine a master can stall past the
// default second.
func conformanceSentinel(t *testing.T, opts *Options) rueidis.Client {
	d := redistest.StartSentinel(t, redistest.WithDownAfter(time.Minute))
	c := newRueidis(t, d.Master.Addr)
	runConformanceBoth(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) {
			return Open(t.Context(), "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName+"?dial_timeout="+testDialTimeout.String(), opts)
		},
		func(t *testing.T) redis.UniversalClient {
			gr := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: d.MasterName, SentinelAddrs: d.SentinelAddrs(), MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: testDialTimeout})
			t.Cleanup(func() { gr.Close() })
			return gr
		})
	return c
}

func TestConformanceStandalone(t *testing.T) {
	conformanceStandalone(t, nil)
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	conformanceCluster(t, redistest.StartCluster(t), nil)
}

func TestConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel set")
	}
	conformanceSentinel(t, nil)
}
