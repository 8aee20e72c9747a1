package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// The conformance suite, floodgatetest.Run, on every topology: with the
// callers' time (every request carries its Now, so the suite checks exact
// decisions) and with the Redis server's TIME (the suite checks what does
// not depend on the time). After each run, every key the suite left has a
// TTL. Package goredisstore runs the same suite through go-redis.

// runConformance runs the suite in both modes on stores that open makes
// with opts, each closed when its test ends, then check.
func runConformance(t *testing.T, check func(t *testing.T), opts *Options, open func(t *testing.T, opts *Options) (*Store, error)) {
	for _, mode := range []struct {
		name string
		opts floodgatetest.Options
	}{
		{"client_time", floodgatetest.Options{}},
		{"server_time", floodgatetest.Options{ServerTime: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
				s, err := open(t, opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}, mode.opts)
		})
	}
	check(t)
}

// conformanceStandalone runs the suite on a standalone Redis with opts and
// returns a client of it.
func conformanceStandalone(t *testing.T, opts *Options) rueidis.Client {
	addr := standaloneAddr(t)
	c := newRueidis(t, addr)
	runConformance(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) { return New(newRueidis(t, addr), opts) })
	return c
}

// conformanceCluster runs the suite on cl with opts and returns a client
// of it.
func conformanceCluster(t *testing.T, cl *redistest.Cluster, opts *Options) rueidis.Client {
	addrs := cl.Addrs()
	c := newRueidisCluster(t, addrs)
	runConformance(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) {
			return Open(t.Context(), "redis-cluster://"+strings.Join(addrs, ",")+"?dial_timeout="+testDialTimeout.String(), opts)
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
	runConformance(t, func(t *testing.T) { checkTTLs(t, c, "") }, opts,
		func(t *testing.T, opts *Options) (*Store, error) {
			return Open(t.Context(), "redis-sentinel://"+strings.Join(d.SentinelAddrs(), ",")+"/"+d.MasterName+"?dial_timeout="+testDialTimeout.String(), opts)
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
