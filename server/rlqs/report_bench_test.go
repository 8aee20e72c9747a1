package rlqs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate-rl/floodgate/grant"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

var reportRuns int

// BenchmarkReport measures the service's cost of one report of a stream
// (session.handle: checks, matching, demand, one grant per bucket at home,
// the answer) with 1 and 100 buckets per report and 8 streams on one rule,
// against a home in memory and on a real Redis: the process's CPU per
// bucket answered (cpu-µs/assignment; one report of 1 bucket is one
// assignment), and Redis's.
func BenchmarkReport(b *testing.B) {
	red := redistest.Standalone(b)
	for _, home := range []string{"memory", "redis"} {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("home=%s/buckets=%d", home, n), func(b *testing.B) {
				var h grant.Home = &grant.MemHome{}
				if home == "redis" {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					rh, err := grant.OpenHome(ctx, "redis://"+red.Addr)
					cancel()
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { rh.Close() })
					h = rh
				}
				now := time.Unix(1_800_000_000, 0)
				// A prefix of its own per run: earlier runs' holders, on the
				// same simulated clock, would seem alive at home.
				reportRuns++
				svc := newTestService(b, &Options{Home: h, Clock: func() time.Time { return now }, Prefix: fmt.Sprintf("run%d|", reportRuns)})
				var ss []*session
				for range 8 {
					ss = append(ss, svc.newSession())
				}
				m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
				for i := range n {
					m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(map[string]string{"user": fmt.Sprint("u", i)}, 5, 1))
				}
				b.ReportAllocs()
				k := 0
				c0, r0 := procCPU(), redisCPU(b, red)
				for b.Loop() {
					now = now.Add(time.Second / 8)
					if _, err := ss[k%len(ss)].handle(context.Background(), m); err != nil {
						b.Fatal(err)
					}
					k++
				}
				b.ReportMetric(float64((procCPU()-c0).Microseconds())/float64(b.N*n), "cpu-µs/assignment")
				if home == "redis" {
					b.ReportMetric(float64((redisCPU(b, red)-r0).Microseconds())/float64(b.N*n), "redis-cpu-µs/assignment")
				}
			})
		}
	}
}

// procCPU is the process's user and system CPU time.
func procCPU() time.Duration {
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
