package goredisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
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
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// BenchmarkClient compares the client libraries: rueidis (redisstore.New),
// which pipelines concurrent calls over a few connections; go-redis (New),
// one command per pooled connection at a time; and go-redis's opt-in,
// experimental AutoPipeliner. work=gcra decides through the store (gcra,
// 100k keys); work=noop runs a script that only returns a reply, by
// EVALSHA through the client, to show what the client itself costs when
// Redis has little to do. It reports decisions/s, roundtrips/op and
// server-µs/op (EVALSHA, EVAL and FCALL from INFO commandstats), and conns,
// the number of connections the client opened.
func BenchmarkClient(b *testing.B) {
	srv := redistest.Standalone(b)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { admin.Close() })
	l := floodgate.Limit{Algorithm: floodgate.GCRA, Limit: 1_000_000, Period: time.Second}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	const noop = "return {1, 0, 0, 0, 0, 1}"
	sum := sha1.Sum([]byte(noop))
	noopSHA := hex.EncodeToString(sum[:])
	if err := admin.ScriptLoad(context.Background(), noop).Err(); err != nil {
		b.Fatal(err)
	}
	base := connectedClients(b, admin) // the measuring client's own
	for _, name := range []string{"rueidis", "goredis", "goredis-autopipeline"} {
		b.Run("client="+name, func(b *testing.B) {
			s, evalNoop := benchClient(b, name, srv.Addr, noopSHA)
			warm(b, s, l, keys)
			for _, work := range []string{"gcra", "noop"} {
				for _, callers := range []int{1, 16, 64, 256} {
					b.Run(fmt.Sprintf("work=%s/callers=%d", work, callers), func(b *testing.B) {
						runCallers(b, admin, callers, func(i int) {
							key := keys[i%len(keys)]
							var err error
							if work == "noop" {
								err = evalNoop(key)
							} else {
								_, err = s.Apply(context.Background(), floodgate.Request{Key: key, Limit: l, Cost: 1})
							}
							if err != nil {
								panic(err)
							}
						})
						b.ReportMetric(float64(connectedClients(b, admin)-base), "conns")
					})
				}
			}
		})
	}
}

// benchClient returns a store over a new client of the named kind, and a
// func that runs the script of digest sha on a key through that client.
func benchClient(b *testing.B, name, addr, sha string) (*redisstore.Store, func(key string) error) {
	if name == "rueidis" {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true, Dialer: net.Dialer{Timeout: testDialTimeout}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		s, err := redisstore.New(c, &redisstore.Options{Prefix: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		return s, func(key string) error {
			_, err := c.Do(context.Background(), c.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Build()).AsIntSlice()
			return err
		}
	}
	gr := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	b.Cleanup(func() { gr.Close() })
	var client redis.UniversalClient = gr
	if name == "goredis-autopipeline" {
		ap, err := gr.AutoPipeline()
		if err != nil {
			b.Fatal(err)
		}
		client = ap
	}
	s := newStore(b, client, &redisstore.Options{Prefix: "bench"})
	return s, func(key string) error {
		_, err := conn{client}.EvalSHA(context.Background(), sha, []string{key}, nil, redisstore.Wait{})
		return err
	}
}

// connectedClients is the number of connections to the server.
func connectedClients(b *testing.B, admin *redis.Client) int {
	info, err := admin.Info(context.Background(), "clients").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// warm makes the state of every key before timing, from 64 goroutines.
func warm(b *testing.B, s *redisstore.Store, l floodgate.Limit, keys []string) {
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 64 {
				if _, err := s.Apply(context.Background(), floodgate.Request{Key: keys[i], Limit: l, Cost: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// runCallers runs op b.N times in all from the given number of goroutines,
// and reports decisions/s, roundtrips/op and server-µs/op.
func runCallers(b *testing.B, admin *redis.Client, callers int, op func(i int)) {
	b.ReportAllocs()
	before, beforeUsec := scriptStats(b, admin)
	if callers == 1 {
		i := 0
		for b.Loop() {
			op(i)
			i++
		}
	} else {
		var ids atomic.Int64
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			i := int(ids.Add(1)) * 7919 // callers start on different keys
			for pb.Next() {
				op(i)
				i++
			}
		})
	}
	b.StopTimer()
	calls, usec := scriptStats(b, admin)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(calls-before)/float64(b.N), "roundtrips/op")
	b.ReportMetric(float64(usec-beforeUsec)/float64(b.N), "server-µs/op")
}

// scriptStats is the number of scripts the server has run and the
// microseconds it spent in them.
func scriptStats(b *testing.B, admin *redis.Client) (calls, usec int64) {
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	stats := redistest.ParseCommandStats(info)
	for _, cmd := range redistest.ScriptCommands {
		calls += stats[cmd].Calls
		usec += stats[cmd].Usec
	}
	return calls, usec
}
