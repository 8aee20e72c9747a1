package goredisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/floodgatetest"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// The conformance suite, floodgatetest.Run, through go-redis on every
// topology, by EVALSHA and by FCALL (Options.Functions), each with the
// callers' time and with the Redis server's TIME, as redisstore runs it
// through rueidis. Its differential case compares every decision with the
// algorithm package on random sequences. After each run, every key the
// suite left has a TTL.

// runConformance runs the suite in both time modes on stores over clients
// that newClient makes, with opts.
func runConformance(t *testing.T, opts *redisstore.Options, newClient func(t *testing.T) redis.UniversalClient) {
	for _, mode := range []struct {
		name string
		opts floodgatetest.Options
	}{
		{"client_time", floodgatetest.Options{}},
		{"server_time", floodgatetest.Options{ServerTime: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			floodgatetest.Run(t, func(t *testing.T) floodgate.Store {
				s, err := New(newClient(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}, mode.opts)
		})
	}
}

// runBoth runs the suite by EVALSHA, then by FCALL, and checks the keys'
// TTLs and that every master of admin holds the library.
func runBoth(t *testing.T, admin redis.UniversalClient, newClient func(t *testing.T) redis.UniversalClient) {
	t.Run("evalsha", func(t *testing.T) { runConformance(t, nil, newClient) })
	t.Run("functions", func(t *testing.T) { runConformance(t, &redisstore.Options{Functions: true}, newClient) })
	checkTTLs(t, admin, "")
	err := forEachMaster(t.Context(), admin, func(ctx context.Context, node *redis.Client) error {
		libs, err := node.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "floodgate_*"}).Result()
		if err != nil {
			return err
		}
		if len(libs) != 1 {
			t.Errorf("%s holds %d Floodgate libraries, want 1", node.Options().Addr, len(libs))
		}
		if n := commandCalls(t, node, "fcall"); n == 0 {
			t.Errorf("%s ran no FCALL", node.Options().Addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConformanceStandalone(t *testing.T) {
	addr := redistest.Standalone(t).Addr
	runBoth(t, newClient(t, addr), func(t *testing.T) redis.UniversalClient { return newClient(t, addr) })
}

func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t).Addrs()
	runBoth(t, newClusterClient(t, addrs), func(t *testing.T) redis.UniversalClient { return newClusterClient(t, addrs) })
}

func TestConformanceSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel set")
	}
	// No failover happens during the run: one would lose counts, and on a
	// loaded machine a master can stall past the default second.
	d := redistest.StartSentinel(t, redistest.WithDownAfter(time.Minute))
	runBoth(t, newClient(t, d.Master.Addr), func(t *testing.T) redis.UniversalClient {
		c := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: d.MasterName, SentinelAddrs: d.SentinelAddrs(),
			MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: testDialTimeout,
		})
		t.Cleanup(func() { c.Close() })
		return c
	})
}
