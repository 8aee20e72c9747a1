package rlqs_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/servertest"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/envoyrls"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

// fleetRuns numbers the fleets of every run of BenchmarkFleet.
var fleetRuns atomic.Int64

// fleetMember is one Envoy of the fleet benchmark: it decides a request of
// a bucket, and does what it does between requests.
type fleetMember interface {
	request(id map[string]string) bool
	tick()
}

// rlsEnvoy is an Envoy with the per-request rate limit filter: one
// ShouldRateLimit call per request, the bucket's entries as one
// descriptor (tenant, then route, as the rule nests them).
type rlsEnvoy struct {
	c rlsv3.RateLimitServiceClient
}

func (e *rlsEnvoy) request(id map[string]string) bool {
	resp, err := e.c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: id["tenant"]}, {Key: "route", Value: id["route"]}}}}})
	return err == nil && resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
}

func (*rlsEnvoy) tick() {}

// cpu is the process's user and system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the Redis server's user and system CPU time.
func redisCPU(b *testing.B, red *redistest.Server) time.Duration {
	var total float64
	for _, line := range strings.Split(red.MustCLI(b, "INFO", "cpu"), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// BenchmarkFleet drives four Envoys for 60 s of simulated time with demand
// twice the limit (the simulations' rule, 100 per 10 s), shifting at 30 s
// from 14/4/2/0 to 0/2/4/14 requests per second, through the quota service
// (protocol=rlqs: reports every second, decisions in the Envoys) and
// through the per-request protocol (protocol=rls: one ShouldRateLimit per
// request), both on one Redis over gRPC on loopback. It reports the
// fleet's admissions against what the limit allows in the span
// (admitted/limit), the process's CPU (the Envoys' side included) and
// Redis's CPU per admitted request, and the gRPC messages per admitted
// request.
func BenchmarkFleet(b *testing.B) {
	red := redistest.Standalone(b)
	demand := [2][4]float64{{14, 4, 2, 0}, {0, 2, 4, 14}}
	const span = 60 * time.Second
	for _, proto := range []string{"rlqs", "rls"} {
		b.Run("protocol="+proto, func(b *testing.B) {
			clock := newClock()
			var admitted, calls int64
			var procCPU, rCPU time.Duration
			iter := 0
			for b.Loop() {
				iter++
				// A tenant of its own each time: the grants and counters of
				// earlier runs, on clocks of their own, stay apart.
				id := map[string]string{"tenant": fmt.Sprintf("t%d", fleetRuns.Add(1)), "route": "/api"}
				members, count := fleetOf(b, proto, red, clock)
				p0, r0 := cpu(), redisCPU(b, red)
				acc := [4]float64{}
				for k := range int(span / (100 * time.Millisecond)) {
					clock.Advance(100 * time.Millisecond)
					phase := 0
					if time.Duration(k)*100*time.Millisecond >= span/2 {
						phase = 1
					}
					for i, m := range members {
						acc[i] += demand[phase][i] * 0.1
						for ; acc[i] >= 1; acc[i]-- {
							if m.request(id) {
								admitted++
							}
						}
						m.tick()
					}
				}
				procCPU += cpu() - p0
				rCPU += redisCPU(b, red) - r0
				calls += count()
			}
			allowed := float64(iter) * simLimit * span.Seconds() / simPeriod.Seconds()
			b.ReportMetric(float64(admitted)/allowed, "admitted/limit")
			b.ReportMetric(float64(procCPU.Microseconds())/float64(admitted), "cpu-µs/admitted")
			b.ReportMetric(float64(rCPU.Microseconds())/float64(admitted), "redis-cpu-µs/admitted")
			b.ReportMetric(float64(calls)/float64(admitted), "msgs/admitted")
		})
	}
}

// fleetOf starts a replica of the protocol on red and four Envoys on it;
// count reports the gRPC messages the Envoys sent.
func fleetOf(b *testing.B, proto string, red *redistest.Server, clock *fakeClock) ([]fleetMember, func() int64) {
	b.Helper()
	if proto == "rlqs" {
		r := startReplica(b, simYAML, simOptions(clock, newRedisHome(b, red.Addr)))
		var es []*simEnvoy
		var out []fleetMember
		for i := range 4 {
			e := newEnvoy(b, clock, r.addr, "edge", time.Second, time.Duration(i)*250*time.Millisecond)
			es = append(es, e)
			out = append(out, e)
		}
		return out, func() int64 {
			var n int64
			for _, e := range es {
				n += e.sent
			}
			return n
		}
	}
	cfg := servertest.Config(b, "rules.yaml", simYAML)
	store, err := redisstore.Open(b.Context(), "redis://"+red.Addr, &redisstore.Options{Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Options{Store: store, Config: cfg, Limiter: floodgate.Options{Timeout: 2 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	envoyrls.Register(g, srv)
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	var out []fleetMember
	var es []*countingRLS
	for range 4 {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		e := &countingRLS{rlsEnvoy: rlsEnvoy{c: rlsv3.NewRateLimitServiceClient(conn)}}
		es = append(es, e)
		out = append(out, e)
	}
	return out, func() int64 {
		var n int64
		for _, e := range es {
			n += e.n
		}
		return n
	}
}

type countingRLS struct {
	rlsEnvoy
	n int64
}

func (e *countingRLS) request(id map[string]string) bool {
	e.n++
	return e.rlsEnvoy.request(id)
}
