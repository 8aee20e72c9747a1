package goredisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// The helpers of these tests, which start their own redis-server processes
// (internal/redistest: they skip loudly without one, and fail when
// FLOODGATE_REQUIRE_REDIS=1).

// testDialTimeout replaces the clients' default 5 s connect timeout: on a
// loaded 2-core machine running every package at once under -race, a
// connect once took longer (see redisstore's tests).
const testDialTimeout = 30 * time.Second

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// newClient returns a go-redis client of a standalone server with the
// options the package doc asks for, closed when the test ends.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: testDialTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// newClusterClient returns a go-redis client of a Redis Cluster.
func newClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: -1, ContextTimeoutEnabled: true, DialTimeout: testDialTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

// newStore returns a store over client with opts, and a key prefix of the
// test's own if opts has none.
func newStore(t testing.TB, client redis.UniversalClient, opts *redisstore.Options) *redisstore.Store {
	t.Helper()
	var o redisstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = testPrefix(t)
	}
	s, err := New(client, &o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testPrefix is a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	return "fgtest-" + strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(t.Name()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func limitOf(alg floodgate.Algorithm, n int64, period time.Duration) floodgate.Limit {
	return floodgate.Limit{Algorithm: alg, Limit: n, Period: period}
}

var leaseSeq atomic.Int64

// request is a request of cost 1 under l, with a lease for concurrency.
func request(key string, l floodgate.Limit, now time.Time) floodgate.Request {
	r := floodgate.Request{Key: key, Limit: l, Cost: 1, Now: now}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease = fmt.Sprintf("lease-%d", leaseSeq.Add(1))
	}
	return r
}

// forEachMaster runs f on c, or on each master of a Cluster client.
func forEachMaster(ctx context.Context, c redis.UniversalClient, f func(ctx context.Context, node *redis.Client) error) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, f)
	}
	return f(ctx, c.(*redis.Client))
}

// checkTTLs fails the test if a key under prefix (every key, if prefix is
// empty) on c's masters has no TTL: no script leaves a key behind.
func checkTTLs(t testing.TB, c redis.UniversalClient, prefix string) {
	t.Helper()
	pattern := "*"
	if prefix != "" {
		pattern = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(prefix) + ":*"
	}
	err := forEachMaster(context.Background(), c, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			// -2: expired since the SCAN; 0: expiring now; -1: no TTL.
			if ttl, err := node.Do(ctx, "PTTL", iter.Val()).Int64(); err != nil {
				return err
			} else if ttl == -1 {
				t.Errorf("key %q has no TTL", iter.Val())
			}
		}
		return iter.Err()
	})
	if err != nil {
		t.Error(err)
	}
}

// commandCalls is the calls= of each of cmds in INFO commandstats of node,
// summed.
func commandCalls(t testing.TB, node *redis.Client, cmds ...string) int64 {
	t.Helper()
	info, err := node.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := redistest.ParseCommandStats(info)
	var n int64
	for _, cmd := range cmds {
		n += stats[cmd].Calls
	}
	return n
}

// scriptCalls is the number of scripts node has run.
func scriptCalls(t testing.TB, node *redis.Client) int64 {
	t.Helper()
	return commandCalls(t, node, redistest.ScriptCommands...)
}
