package redisstore

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// standaloneAddr starts a redis-server for the test (internal/redistest:
// it skips loudly without one, and fails when FLOODGATE_REQUIRE_REDIS=1)
// and returns its address.
func standaloneAddr(t testing.TB) string {
	t.Helper()
	return redistest.Standalone(t).Addr
}

// testDialTimeout replaces the clients' default 5 s connect timeout in
// these tests. A client may dial a new connection in the middle of a test
// (rueidis opens its multiplexed connections when first used), and on a
// 2-core CI machine running every package at once under -race, with each
// test's own redis-servers, a connect once took longer than 5 s. The tests
// check what is decided, not how fast, so they wait.
const testDialTimeout = 30 * time.Second

// newRueidis returns a rueidis client of a standalone server, closed when
// the test ends.
func newRueidis(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: testDialTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newRueidisCluster returns a rueidis client of a Redis Cluster.
func newRueidisCluster(t testing.TB, addrs []string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true, Dialer: net.Dialer{Timeout: testDialTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testPrefix is a key prefix of the test's own.
func testPrefix(t testing.TB) string {
	return "fgtest-" + strings.NewReplacer("/", "-", " ", "_", "{", "(", "}", ")").Replace(t.Name()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// checkTTLsAtEnd registers a check, run when the test ends, that every key
// under prefix on every node has a TTL: no script leaves a key behind.
func checkTTLsAtEnd(t testing.TB, c rueidis.Client, prefix string) {
	t.Helper()
	t.Cleanup(func() { checkTTLs(t, c, prefix) })
}

// checkTTLs fails the test if a key under prefix (every key, if prefix is
// empty) has no TTL, and returns the number of keys it saw on each node.
func checkTTLs(t testing.TB, c rueidis.Client, prefix string) map[string]int {
	t.Helper()
	ctx := context.Background()
	pattern := "*"
	if prefix != "" {
		pattern = escapeGlob(prefix) + ":*"
	}
	seen := make(map[string]int)
	for addr, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Errorf("SCAN on %s: %v", addr, err)
				return seen
			}
			for _, k := range e.Elements {
				seen[addr]++
				ttl, err := node.Do(ctx, node.B().Pttl().Key(k).Build()).AsInt64()
				switch {
				case err != nil:
					t.Errorf("PTTL %s: %v", k, err)
				case ttl == -1: // -2: expired since the SCAN; 0: expiring now
					t.Errorf("key %q has no TTL", k)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return seen
}

func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}
