package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestMain stops the redis-server that a Redis benchmark or test started.
func TestMain(m *testing.M) {
	code := m.Run()
	stopRedis()
	os.Exit(code)
}

var (
	redisOnce   sync.Once
	redisServer *Redis
	redisErr    error
)

// startRedis starts one redis-server (StartRedis) for the whole run; every
// library benchmarked shares it. It skips when redis-server is absent.
func startRedis(tb testing.TB) string {
	tb.Helper()
	redisOnce.Do(func() { redisServer, redisErr = StartRedis() })
	if redisErr != nil {
		if os.Getenv("FLOODGATE_REQUIRE_REDIS") == "1" {
			tb.Fatalf("redis-server: %v", redisErr)
		}
		tb.Skipf("SKIPPED, no Redis: %v", redisErr)
	}
	return redisServer.Addr
}

func stopRedis() { redisServer.Stop() }

const redisLimit = RedisLimit

// A redisLib answers "may key take one unit?" against the shared Redis.
type redisLib struct {
	name string
	make func(tb testing.TB, addr string) func(ctx context.Context, key string) bool
}

// redisLibs are the harness's fixed_window and gcra variants, the peers and
// the Go client's ceiling (bench/cmd/benchall runs every variant).
var redisLibs = []redisLib{
	fromHarness("floodgate-gcra", variant("gcra").Lib()),
	fromHarness("floodgate-fixed_window", variant("fixed_window").Lib()),
	fromHarness("floodgate-gcra+no_coalesce", variant("gcra+no_coalesce").Lib()),
	fromHarness("floodgate-fixed_window+no_coalesce", variant("fixed_window+no_coalesce").Lib()),
	fromHarness("redis_rate", PeerLibs[0]),
	fromHarness("ulule", PeerLibs[1]),
	fromHarness("minimal-script", CeilingLib),
}

func variant(name string) Variant {
	for _, v := range FloodgateVariants {
		if v.Name == name {
			return v
		}
	}
	panic("no variant " + name)
}

// fromHarness adapts a RedisLib to the benchmarks: any error fails the
// benchmark.
func fromHarness(name string, l RedisLib) redisLib {
	return redisLib{name, func(tb testing.TB, addr string) func(context.Context, string) bool {
		allow, closeLib, err := l.Open(addr)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(closeLib)
		return func(ctx context.Context, key string) bool {
			ok, err := allow(ctx, key)
			if err != nil {
				panic(err)
			}
			return ok
		}
	}}
}

func newGoRedis(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

var (
	redisKeysOnce sync.Once
	redisKeyList  []string
	redisCallerID atomic.Int64
)

func redisKeys(n int) []string {
	redisKeysOnce.Do(func() {
		redisKeyList = make([]string, 100_000)
		for i := range redisKeyList {
			redisKeyList[i] = "user:" + strconv.Itoa(i)
		}
	})
	return redisKeyList[:n]
}

// BenchmarkRedis compares floodgate's Redis store with redis_rate and
// ulule/limiter on one redis-server, in one run: one decision of one unit
// per operation, over one hot key or 100k keys (visited in turn, each seen
// once before timing), by 1, 16, 64 or 256 concurrent callers
// (b.SetParallelism(callers/GOMAXPROCS); callers=1 is a plain loop). Besides
// decisions/s it reports cpu-ns/op (this process: the client side),
// redis-cpu-µs/op (the redis-server process, from INFO cpu) and
// scripts/op (the EVALSHA and EVAL calls Redis ran per decision, from INFO
// commandstats). lib=ceiling-P1 and ceiling-P16 then run redis-benchmark
// against the same server (see runCeiling).
func BenchmarkRedis(b *testing.B) {
	addr := startRedis(b)
	stats := newGoRedis(b, addr)
	for _, lib := range redisLibs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			allow := lib.make(b, addr)
			for _, n := range []int{1, 100_000} {
				keys := redisKeys(n)
				warmRedis(b, allow, keys)
				b.Run("keys="+count(n), func(b *testing.B) {
					for _, callers := range []int{1, 16, 64, 256} {
						b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
							runRedis(b, stats, callers, keys, allow)
						})
					}
				})
			}
		})
	}
	// The ceiling, on the same server in the same run: redis-benchmark
	// running EVALSHA of floodgate's fixed_window script with the arguments
	// floodgate sends, -c callers connections, unpipelined and -P 16.
	sha := loadFixedWindow(b, stats)
	for _, pipeline := range []int{1, 16} {
		b.Run(fmt.Sprintf("lib=ceiling-P%d", pipeline), func(b *testing.B) {
			for _, n := range []int{1, 100_000} {
				b.Run("keys="+count(n), func(b *testing.B) {
					for _, callers := range []int{1, 16, 64, 256} {
						b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
							runCeiling(b, stats, addr, sha, n, callers, pipeline)
						})
					}
				})
			}
		})
	}
}

// loadFixedWindow loads fixedWindowScript and returns its SHA-1.
func loadFixedWindow(tb testing.TB, c *redis.Client) string {
	sha, err := c.ScriptLoad(context.Background(), fixedWindowScript(tb)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return sha
}

// runCeiling runs EVALSHA calls of the fixed_window script with
// redis-benchmark, as redis-ceiling.sh does; cpu-ns/op is redis-benchmark's
// CPU time. It makes at least 16 pipelines per connection and a whole number
// of pipelines (redis-benchmark with fewer requests than connections can
// take a second to finish, and aborts with part of a pipeline), so in the
// first, small rounds ns/op overstates; the metrics are per call made.
func runCeiling(b *testing.B, stats *redis.Client, addr, sha string, keys, callers, pipeline int) {
	host, port, _ := net.SplitHostPort(addr)
	key := "fw:hot"
	batch := callers * pipeline
	calls := (max(b.N, 16*batch) + batch - 1) / batch * batch
	args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(callers), "-n", strconv.Itoa(calls),
		"-P", strconv.Itoa(pipeline), "-q"}
	if keys > 1 {
		key = "fw:user:__rand_int__"
		args = append(args, "-r", strconv.Itoa(keys))
	}
	// Options end at the first command word.
	args = append(args, "evalsha", sha, "1", key,
		"-1", strconv.Itoa(redisLimit), "1000000", "1", "0", "0", "")
	cmd := exec.Command("redis-benchmark", args...)
	before := serverStats(b, stats)
	b.ResetTimer()
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	after := serverStats(b, stats)
	n := float64(calls)
	b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())/n, "cpu-ns/op")
	b.ReportMetric((after.cpuSec-before.cpuSec)*1e6/n, "redis-cpu-µs/op")
	b.ReportMetric(float64(after.scripts-before.scripts)/n, "scripts/op")
}

// warmRedis makes the state of every key before timing, from 64 goroutines.
func warmRedis(tb testing.TB, allow func(context.Context, string) bool, keys []string) {
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 64 {
				allow(context.Background(), keys[i])
			}
		})
	}
	wg.Wait()
}

func runRedis(b *testing.B, stats *redis.Client, callers int, keys []string, allow func(context.Context, string) bool) {
	b.ReportAllocs()
	var denied atomic.Int64
	ctx := context.Background()
	before := serverStats(b, stats)
	cpu0, cpuOK := cpuTime()
	if callers == 1 {
		i := 0
		for b.Loop() {
			if !allow(ctx, keys[i%len(keys)]) {
				denied.Add(1)
			}
			i++
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			i := int(redisCallerID.Add(1)) * 7919 // callers start on different keys
			for pb.Next() {
				if !allow(ctx, keys[i%len(keys)]) {
					denied.Add(1)
				}
				i++
			}
		})
	}
	b.StopTimer()
	cpu1, _ := cpuTime()
	after := serverStats(b, stats)
	if d := denied.Load(); d > 0 {
		b.Fatalf("%d of %d denied; the limit must admit everything", d, b.N)
	}
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "decisions/s")
	if cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/n, "cpu-ns/op")
	}
	b.ReportMetric((after.cpuSec-before.cpuSec)*1e6/n, "redis-cpu-µs/op")
	b.ReportMetric(float64(after.scripts-before.scripts)/n, "scripts/op")
}

type redisStats struct {
	cpuSec  float64
	scripts int64
}

func serverStats(tb testing.TB, c *redis.Client) redisStats {
	st, err := ReadServerStats(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return redisStats{st.CPUSec, st.Scripts}
}

// fixedWindowScript is FixedWindowScript of this repository.
func fixedWindowScript(tb testing.TB) string {
	src, err := FixedWindowScript("..")
	if err != nil {
		tb.Fatal(err)
	}
	return src
}

// TestFixedWindowScript checks that the scripts redis-ceiling.sh loads are
// the ones floodgate runs: after a fixed_window decision through
// redisstore, Redis holds fixed_window_fast.lua (the small script a
// single aligned decision goes out as, the file unchanged); and after
// a decision that script declines (the key holds a layout-1 state, see
// docs/redis.md), Redis holds a script with the SHA-1 of
// fixedWindowScript. With FLOODGATE_PRINT_SCRIPT=file it also writes the
// full script's source to file.
func TestFixedWindowScript(t *testing.T) {
	src := fixedWindowScript(t)
	if f := os.Getenv("FLOODGATE_PRINT_SCRIPT"); f != "" {
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fast, err := os.ReadFile("../store/redisstore/scripts/fixed_window_fast.lua")
	if err != nil {
		t.Fatal(err)
	}
	addr := startRedis(t)
	c := newGoRedis(t, addr)
	ctx := context.Background()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	allow := fromHarness("fixed_window", variant("fixed_window").Lib()).make(t, addr)
	held := func(what, src string) {
		t.Helper()
		sum := sha1.Sum([]byte(src))
		sha := hex.EncodeToString(sum[:])
		exists, err := c.ScriptExists(ctx, sha).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !exists[0] {
			t.Fatalf("Redis has no script %s after %s: the source differs from redisstore's", sha, what)
		}
	}
	if !allow(ctx, "script-check") {
		t.Fatal("denied")
	}
	held("a fixed_window decision", string(fast))
	keys, err := c.Keys(ctx, "*script-check*:w").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the decision's counter: keys %v, %v; want one <key>:w", keys, err)
	}
	// A layout-1 state of another key, before its first decision: the
	// fast script declines a key that has one.
	other := strings.Replace(strings.TrimSuffix(keys[0], ":w"), "script-check", "script-other", 1)
	if err := c.Set(ctx, other, "0:0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if !allow(ctx, "script-other") {
		t.Fatal("denied")
	}
	held("a decision the fast script declines", src)
}

// TestMinimalScript: the Go client's ceiling row (CeilingLib) runs the
// script redis-ceiling.sh gives redis-benchmark, byte for byte, so the two
// ceilings differ only in their client.
func TestMinimalScript(t *testing.T) {
	sh, err := os.ReadFile("redis-ceiling.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(sh), "cat >\"$minsrc\" <<'LUA'\n")
	body, _, ok2 := strings.Cut(after, "\nLUA\n")
	if !ok || !ok2 {
		t.Fatal("redis-ceiling.sh has no minimal script between <<'LUA' and LUA")
	}
	if body+"\n" != MinimalScript {
		t.Errorf("MinimalScript differs from redis-ceiling.sh's:\n%s\nwant\n%s", MinimalScript, body+"\n")
	}
}

// TestRedisLibsAllow checks that every library admits what the benchmark
// sends it (a few hundred decisions on one key).
func TestRedisLibsAllow(t *testing.T) {
	addr := startRedis(t)
	for _, lib := range redisLibs {
		allow := lib.make(t, addr)
		for i := range 300 {
			if !allow(context.Background(), "allow-check") {
				t.Fatalf("%s denied decision %d", lib.name, i)
			}
		}
	}
}
