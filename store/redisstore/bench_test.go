package redisstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// BenchmarkAllow decides one unit per operation against a local
// redis-server, with the server's clock: every algorithm, over one hot key
// or 100k keys (visited in turn, made before timing), by 1, 16, 64 or 256
// concurrent callers sharing one rueidis client. It reports decisions/s,
// roundtrips/op (the scripts the server ran per decision: EVALSHA and EVAL
// calls from INFO commandstats, each one request and one reply, pipelined
// with the other callers' or not) and server-µs/op (the time Redis spent
// running them, which a loaded machine disturbs less than wall time).
func BenchmarkAllow(b *testing.B) {
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	s, err := New(c, &Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store=redis", func(b *testing.B) {
		for _, alg := range floodgate.Algorithms {
			b.Run("alg="+string(alg), func(b *testing.B) {
				l := benchLimit(alg)
				for _, n := range []int{1, 100_000} {
					b.Run("keys="+benchCount(n), func(b *testing.B) {
						keys := benchKeys(n)
						warm(b, s, l, keys)
						for _, callers := range []int{1, 16, 64, 256} {
							b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
								runCallers(b, c, callers, func(i int, lease string) {
									benchOp(s, l, keys[i%len(keys)], lease, i)
								})
							})
						}
					})
				}
			})
		}
	})
}

// BenchmarkClient compares the client libraries on one workload (gcra,
// 100k keys): rueidis, which pipelines concurrent calls over a few
// connections; go-redis, one command per pooled connection at a time; and
// go-redis's opt-in, experimental AutoPipeliner.
func BenchmarkClient(b *testing.B) {
	srv := redistest.Standalone(b)
	c := newRueidis(b, srv.Addr)
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	b.Cleanup(func() { gr.Close() })
	ap, err := gr.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	stores := []struct {
		name string
		conn conn
	}{
		{"rueidis", rueidisConn{c}},
		{"goredis", goRedisConn{gr}},
		{"goredis-autopipeline", goRedisConn{ap}},
	}
	l := benchLimit(floodgate.GCRA)
	keys := benchKeys(100_000)
	for _, st := range stores {
		s, err := newStore(st.conn, &Options{Prefix: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("client="+st.name, func(b *testing.B) {
			warm(b, s, l, keys)
			for _, callers := range []int{1, 16, 64, 256} {
				b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
					runCallers(b, c, callers, func(i int, _ string) {
						benchOp(s, l, keys[i%len(keys)], "", i)
					})
				})
			}
		})
	}
}

// runCallers runs op b.N times in all from the given number of goroutines,
// and reports decisions/s and roundtrips/op.
func runCallers(b *testing.B, c rueidis.Client, callers int, op func(i int, lease string)) {
	b.ReportAllocs()
	before, beforeUsec := scriptStats(b, c)
	if callers == 1 {
		lease := fmt.Sprint("g", benchLeases.Add(1))
		i := 0
		for b.Loop() {
			op(i, lease)
			i++
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			id := benchLeases.Add(1)
			lease := fmt.Sprint("g", id)
			i := int(id) * 7919 // callers start on different keys
			for pb.Next() {
				op(i, lease)
				i++
			}
		})
	}
	b.StopTimer()
	calls, usec := scriptStats(b, c)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(calls-before)/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(usec-beforeUsec)/float64(b.N), "server-µs/op")
}

// scriptStats is the number of scripts the server has run (EVALSHA and
// EVAL calls, from INFO commandstats; the commands a script runs inside are
// counted under their own names and are not round trips) and the
// microseconds it spent in them.
func scriptStats(b *testing.B, c rueidis.Client) (calls, usec int64) {
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		_, stats, _ := strings.Cut(strings.TrimSpace(line), ":")
		for kv := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}

// benchLimit is a limit that admits most of what the benchmark sends; the
// log and concurrency algorithms keep one entry per unit, so their limit is
// smaller.
func benchLimit(alg floodgate.Algorithm) floodgate.Limit {
	switch alg {
	case floodgate.SlidingWindowLog:
		return floodgate.Limit{Algorithm: alg, Limit: 1000, Period: time.Second}
	case floodgate.Concurrency:
		return floodgate.Limit{Algorithm: alg, Limit: 1000, Period: time.Minute}
	}
	return floodgate.Limit{Algorithm: alg, Limit: 1_000_000, Period: time.Second}
}

var (
	benchKeysOnce sync.Once
	benchKeyList  []string
	benchLeases   atomic.Int64
)

func benchKeys(n int) []string {
	benchKeysOnce.Do(func() {
		benchKeyList = make([]string, 100_000)
		for i := range benchKeyList {
			benchKeyList[i] = "user:" + strconv.Itoa(i)
		}
	})
	return benchKeyList[:n]
}

func benchCount(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// warm makes the state of every key before timing, from 64 goroutines.
func warm(b *testing.B, s *Store, l floodgate.Limit, keys []string) {
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 64 {
				benchOp(s, l, keys[i], "warm", 2*i)
			}
		})
	}
	wg.Wait()
}

// benchOp is one decision on key: cost 1, or for Concurrency, acquiring and
// releasing the caller's lease in turn.
func benchOp(s *Store, l floodgate.Limit, key, lease string, i int) {
	r := floodgate.Request{Key: key, Limit: l, Cost: 1}
	if l.Algorithm == floodgate.Concurrency {
		r.Lease, r.Release = lease, i%2 == 1
	}
	if _, err := s.Apply(context.Background(), r); err != nil {
		panic(err)
	}
}
