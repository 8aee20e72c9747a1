package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/store/memstore"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// This file is the harness shared by the Go benchmarks of this package
// (redis_test.go) and by cmd/benchall, the one command that prints the
// whole table: the Redis server they share, the libraries and the load
// they all get.

// RedisLimit is the rate every Redis library gets: a million per second per
// key, so that nothing is denied on this machine (at most about 100k
// decisions per second reach one Redis here). The algorithms that keep one
// entry per unit get floodgate.MaxLogLimit instead.
const RedisLimit = 1_000_000

// AllowFunc decides one unit for key. It is safe for concurrent use.
type AllowFunc func(ctx context.Context, key string) (allowed bool, err error)

// RedisLib is a library deciding against a Redis server.
type RedisLib struct {
	Name string
	// Open connects to the Redis at addr (host:port); close releases it.
	Open func(addr string) (allow AllowFunc, close func(), err error)
}

// Variant is one way of running floodgate's Redis store: a Limit (its
// Limit and Period are the benchmark's; the other fields are the
// variant's) and the store's options. A new store feature is measured by
// adding one Variant to FloodgateVariants.
type Variant struct {
	Name    string
	Limit   floodgate.Limit
	Options *redisstore.Options
}

// FloodgateVariants are the rows of floodgate's Redis store: every
// algorithm with default options, then the features measured beside their
// base algorithm (named base+feature): local budgets
// (floodgate.Limit.LocalBudget) and Redis functions
// (redisstore.Options.Functions, FCALL instead of EVALSHA).
var FloodgateVariants = []Variant{
	{Name: "fixed_window", Limit: floodgate.Limit{Algorithm: floodgate.FixedWindow}},
	{Name: "sliding_window_log", Limit: floodgate.Limit{Algorithm: floodgate.SlidingWindowLog}},
	{Name: "sliding_window", Limit: floodgate.Limit{Algorithm: floodgate.SlidingWindow}},
	{Name: "token_bucket", Limit: floodgate.Limit{Algorithm: floodgate.TokenBucket}},
	{Name: "gcra", Limit: floodgate.Limit{Algorithm: floodgate.GCRA}},
	{Name: "concurrency", Limit: floodgate.Limit{Algorithm: floodgate.Concurrency}},
	// Local budgets: each instance claims up to 1000 units at once
	// and admits them in process (floodgate.Limit.LocalBudget).
	{Name: "fixed_window+local_budget", Limit: floodgate.Limit{Algorithm: floodgate.FixedWindow, LocalBudget: 1000}},
	{Name: "sliding_window+local_budget", Limit: floodgate.Limit{Algorithm: floodgate.SlidingWindow, LocalBudget: 1000}},
	// Rate slices: each instance decides a GCRA on a leased slice of the
	// rate, here all of it (one instance); a key's first decision waits
	// for its lease, so uniform keys cost more than without.
	{Name: "gcra+local_budget", Limit: floodgate.Limit{Algorithm: floodgate.GCRA, LocalBudget: RedisLimit}},
	{Name: "fixed_window+functions", Limit: floodgate.Limit{Algorithm: floodgate.FixedWindow}, Options: &redisstore.Options{Functions: true}},
	{Name: "gcra+functions", Limit: floodgate.Limit{Algorithm: floodgate.GCRA}, Options: &redisstore.Options{Functions: true}},
	// Without coalescing (redisstore.Options.Coalesce -1): one script run
	// per call, as before coalescing.
	{Name: "fixed_window+no_coalesce", Limit: floodgate.Limit{Algorithm: floodgate.FixedWindow}, Options: &redisstore.Options{Coalesce: -1}},
	{Name: "gcra+no_coalesce", Limit: floodgate.Limit{Algorithm: floodgate.GCRA}, Options: &redisstore.Options{Coalesce: -1}},
}

// BenchLimit is v's limit with the benchmark's rate: RedisLimit per second
// (MaxLogLimit for the algorithms that keep one entry per unit; concurrency
// leases of a minute).
func (v Variant) BenchLimit() floodgate.Limit {
	l := v.Limit
	l.Limit, l.Period = RedisLimit, time.Second
	switch l.Algorithm {
	case floodgate.SlidingWindowLog:
		l.Limit = floodgate.MaxLogLimit
	case floodgate.Concurrency:
		l.Limit, l.Period = floodgate.MaxLogLimit, time.Minute
	}
	return l
}

// Lib decides through floodgate.Limiter on redisstore (rueidis, from
// redisstore.Open), server clock. A concurrency decision acquires a lease
// and releases it at once (two scripts).
func (v Variant) Lib() RedisLib {
	return RedisLib{Name: "floodgate " + v.Name, Open: func(addr string) (AllowFunc, func(), error) {
		s, err := redisstore.Open(context.Background(), "redis://"+addr+"/0", v.Options)
		if err != nil {
			return nil, nil, err
		}
		lim, err := floodgate.New(s, nil)
		if err != nil {
			s.Close()
			return nil, nil, err
		}
		l := v.BenchLimit()
		if err := l.Validate(); err != nil {
			s.Close()
			return nil, nil, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		if l.Algorithm == floodgate.Concurrency {
			return func(ctx context.Context, key string) (bool, error) {
				lease, d, err := lim.Acquire(ctx, key, l)
				if err != nil || !d.Allowed {
					return false, err
				}
				return true, lease.Release(ctx)
			}, func() { s.Close() }, nil
		}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Allow(ctx, key, l)
			return d.Allowed, err
		}, func() { s.Close() }, nil
	}}
}

// PeerLibs are the other Go libraries on Redis, each on a go-redis v9
// client with default options.
var PeerLibs = []RedisLib{
	{"redis_rate", openRedisRate},
	{"ulule/limiter", openUlule},
}

// MinimalScriptName is the row of CeilingLib.
const MinimalScriptName = "minimal script (rueidis)"

// CeilingLib is the physical ceiling of a Go client on Redis: the
// cheapest script a counter can be (redis-ceiling.sh's minimal INCR, and
// PEXPIRE when the INCR made the key; nothing checked, one integer
// answered), sent with EVALSHA by a rueidis client configured as
// redisstore.Open configures its own (AlwaysPipelining, no client-side
// cache), from the same harness and callers as every other row. Where
// redis-benchmark's figure for the same script is the server's ceiling
// (a C client pipelining a fixed depth, nothing decoded), this row is
// what the store's client and this process leave of it.
var CeilingLib = RedisLib{MinimalScriptName, openMinimalScript}

// MinimalScript is redis-ceiling.sh's minimal script, the same text.
const MinimalScript = `local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n
`

// openMinimalScript is CeilingLib: a key counts in the window of one
// second, as RedisLimit is per second.
func openMinimalScript(addr string) (AllowFunc, func(), error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true, AlwaysPipelining: true,
	})
	if err != nil {
		return nil, nil, err
	}
	script := rueidis.NewLuaScript(MinimalScript)
	args := []string{"1000"}
	return func(ctx context.Context, key string) (bool, error) {
		n, err := script.Exec(ctx, c, []string{"minimal:" + key}, args).AsInt64()
		return err == nil && n <= RedisLimit, err
	}, c.Close, nil
}

// RedisLibs are FloodgateVariants' libraries, then PeerLibs, then
// CeilingLib.
func RedisLibs() []RedisLib {
	var libs []RedisLib
	for _, v := range FloodgateVariants {
		libs = append(libs, v.Lib())
	}
	libs = append(libs, PeerLibs...)
	return append(libs, CeilingLib)
}

// openRedisRate is github.com/go-redis/redis_rate/v10 (GCRA).
func openRedisRate(addr string) (AllowFunc, func(), error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	l := redis_rate.NewLimiter(c)
	r := redis_rate.PerSecond(RedisLimit)
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key, r)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, func() { c.Close() }, nil
}

// openUlule is github.com/ulule/limiter/v3 (a fixed window) with its Redis
// store.
func openUlule(addr string) (AllowFunc, func(), error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	s, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule"})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	l := limiter.New(s, limiter.Rate{Period: time.Second, Limit: RedisLimit})
	return func(ctx context.Context, key string) (bool, error) {
		res, err := l.Get(ctx, key)
		if err != nil {
			return false, err
		}
		return !res.Reached, nil
	}, func() { c.Close() }, nil
}

// MemLib is an in-process limiter. Open gets the keys the load will use,
// so that libraries without keys (x/time/rate) can make theirs up front.
type MemLib struct {
	Name string
	Open func(keys []string) (allow AllowFunc, close func(), err error)
}

// MemLimit is the rate of the in-process rows, a hundred million per
// second, with a burst of MemBurst, 0.4 s of it (floodgate allows burst ×
// limit up to 2^52): more than one process can ask here, and a tolerance
// wide enough that a caller preempted between reading the clock and
// deciding is still admitted.
const (
	MemLimit = 100_000_000
	MemBurst = 40_000_000
)

// MemLibs are floodgate's memory store through Limiter.Allow (gcra and
// token_bucket), x/time/rate and go-limiter's memorystore.
var MemLibs = []MemLib{
	{"floodgate memstore gcra", openMemstore(floodgate.GCRA)},
	{"floodgate memstore token_bucket", openMemstore(floodgate.TokenBucket)},
	{"x/time/rate", openXTimeRate},
	{"go-limiter memorystore", openGoLimiter},
}

func openMemstore(alg floodgate.Algorithm) func([]string) (AllowFunc, func(), error) {
	return func([]string) (AllowFunc, func(), error) {
		s := memstore.New(nil)
		lim, err := floodgate.New(s, nil)
		if err != nil {
			s.Close()
			return nil, nil, err
		}
		l := floodgate.Limit{Algorithm: alg, Limit: MemLimit, Period: time.Second, Burst: MemBurst}
		return func(ctx context.Context, key string) (bool, error) {
			d, err := lim.Allow(ctx, key, l)
			return d.Allowed, err
		}, func() { s.Close() }, nil
	}
}

// openXTimeRate keeps one rate.Limiter per key. x/time/rate has no notion
// of keys, so the limiters are made up front in a map that is only read
// during the run: no lock and no insertion, which flatters it against the
// stores that take new keys at any time.
func openXTimeRate(keys []string) (AllowFunc, func(), error) {
	m := make(map[string]*rate.Limiter, len(keys))
	for _, k := range keys {
		m[k] = rate.NewLimiter(MemLimit, MemBurst)
	}
	return func(_ context.Context, key string) (bool, error) {
		l := m[key]
		if l == nil {
			return false, fmt.Errorf("x/time/rate: no limiter for key %q", key)
		}
		return l.Allow(), nil
	}, func() {}, nil
}

// openGoLimiter is github.com/sethvargo/go-limiter's memorystore, with
// MemLimit tokens per 1000 hours rather than per second. go-limiter v0.7.1
// refills a bucket with (intervals elapsed) × interval/tokens tokens (its
// fillRate is inverted), which is fewer than tokens once tokens exceed
// about the square root of the interval in nanoseconds (31,623 per
// second): at MemLimit per second it would deny everything after the
// first second. Within its first interval a bucket does the same work per
// call, and MemLimit is more than a run can take from one key.
func openGoLimiter([]string) (AllowFunc, func(), error) {
	s, err := memorystore.New(&memorystore.Config{Tokens: MemLimit, Interval: 1000 * time.Hour})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) (bool, error) {
		_, _, _, ok, err := s.Take(ctx, key)
		return ok, err
	}, func() { s.Close(context.Background()) }, nil
}

// Keys are the benchmark's keys: "user:0" to "user:<n-1>".
func Keys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// Redis is a redis-server started on a free loopback port, without
// persistence.
type Redis struct {
	Addr string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server and waits (up to 10 s) until it answers
// PING.
func StartRedis() (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, fmt.Errorf("redis-server on %s: %w", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polls a process we do not control
	}
}

// Pid is the redis-server process id.
func (r *Redis) Pid() int { return r.cmd.Process.Pid }

// Port is the port it listens on.
func (r *Redis) Port() string {
	_, p, _ := net.SplitHostPort(r.Addr)
	return p
}

// Stop kills the server and waits for it.
func (r *Redis) Stop() {
	if r != nil && r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// ServerStats are the counters of a Redis server that a row reads before
// and after its run.
type ServerStats struct {
	CPUSec  float64 // used_cpu_user + used_cpu_sys
	Scripts int64   // EVALSHA, EVAL and FCALL calls
	// Calls is every command call except INFO (which reading these
	// stats makes).
	Calls int64
}

// ReadServerStats reads INFO cpu and commandstats.
func ReadServerStats(ctx context.Context, c *redis.Client) (ServerStats, error) {
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return ServerStats{}, err
	}
	var s ServerStats
	for line := range strings.SplitSeq(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.CPUSec += f
			continue
		}
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		switch name {
		case "info":
			continue
		case "evalsha", "eval", "fcall":
			// A script run, by SHA, by source, or as a Redis function.
			s.Scripts += n
		}
		s.Calls += n
	}
	return s, nil
}

// FixedWindowScript is the source of redisstore's single-request
// fixed_window script, built as store/redisstore/scripts.go builds it:
// common.lua, state.lua, then fixed_window.lua, each followed by a newline. root is
// the repository's root directory. redis-ceiling.sh builds the same bytes.
func FixedWindowScript(root string) (string, error) {
	var src strings.Builder
	for _, name := range []string{"common.lua", "state.lua", "fixed_window.lua"} {
		b, err := os.ReadFile(filepath.Join(root, "store", "redisstore", "scripts", name))
		if err != nil {
			return "", err
		}
		src.WriteString(string(b) + "\n")
	}
	return src.String(), nil
}
