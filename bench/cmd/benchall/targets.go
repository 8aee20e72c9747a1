package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/floodgate-rl/floodgate/bench"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

// target is one row of the targets table: a figure of Floodgate's beside
// its reference in the same run, their ratio, and the bound the ratio is
// held to.
type target struct {
	what, floodgate, reference string
	ratio                      float64
	// atLeast is true when the ratio must reach bound, false when it must
	// not pass it.
	atLeast bool
	bound   float64
}

func (t target) met() bool {
	if math.IsNaN(t.ratio) {
		return false
	}
	if t.atLeast {
		return t.ratio >= t.bound
	}
	return t.ratio <= t.bound
}

func (t target) want() string {
	if t.atLeast {
		return fmt.Sprintf("≥ %.1f", t.bound)
	}
	return fmt.Sprintf("≤ %.1f", t.bound)
}

// targets writes the one table BENCHMARKS.md shows: every performance
// target of the project beside what this run measured, each row computed
// from rows of the sections above (so the table and its sources cannot
// disagree). A row whose load this run did not have (the quick mode has
// no 256 callers; no envoyproxy/ratelimit binary) falls back to the most
// callers it had, and says so, or is left out with a note.
func targets(out io.Writer, ceil ceilingResult, redisRows, memRows, serveRows []row) {
	var ts []target
	var notes []string
	most := func(rows []row, lib string, keys int, want int) (row, bool) {
		if r, ok := find(rows, lib, keys, want); ok {
			return r, true
		}
		var best row
		found := false
		for _, r := range rows {
			if r.lib == lib && r.keys == keys && (!found || r.callers > best.callers) {
				best, found = r, true
			}
		}
		return best, found
	}
	perSec := func(r row) string { return thousands(r.sum.DecisionsPerSec) + "/s" }

	if r, ok := most(redisRows, "floodgate fixed_window", 100_000, 256); ok && ceil.minP16 > 0 {
		ts = append(ts, target{
			what:      fmt.Sprintf("Redis `fixed_window`, %d callers, 100k keys ÷ the minimal `INCR`+`PEXPIRE` script pipelined 16 deep", r.callers),
			floodgate: perSec(r), reference: thousands(ceil.minP16) + "/s",
			ratio: r.sum.DecisionsPerSec / ceil.minP16, atLeast: true, bound: 0.5,
		})
		us := redisMicros(r)
		ts = append(ts, target{
			what:      fmt.Sprintf("Redis CPU per `fixed_window` decision, %d callers ÷ the minimal script's per call at `-P 16`", r.callers),
			floodgate: num(us, 2) + " µs", reference: num(ceil.minCPU[1], 2) + " µs",
			ratio: us / ceil.minCPU[1], bound: 2,
		})
	}
	// The same minimal script through a Go client in this process: what
	// the client side leaves of redis-benchmark's ceiling.
	if r, ok := most(redisRows, "floodgate fixed_window", 100_000, 256); ok && ceil.minP16 > 0 {
		if m, ok := find(redisRows, bench.MinimalScriptName, 100_000, r.callers); ok {
			notes = append(notes, fmt.Sprintf("the minimal script sent by a Go client in this process (%s, %d callers, 100k keys) ran %s/s, %.2f of redis-benchmark's `-P 16` figure; `fixed_window` ran %.2f of it",
				bench.MinimalScriptName, r.callers, thousands(m.sum.DecisionsPerSec), m.sum.DecisionsPerSec/ceil.minP16, r.sum.DecisionsPerSec/m.sum.DecisionsPerSec))
		}
	}
	for _, c := range []int{64, 256} {
		r, ok1 := find(redisRows, "floodgate gcra", 100_000, c)
		p, ok2 := find(redisRows, "redis_rate", 100_000, c)
		if ok1 && ok2 {
			ts = append(ts, target{
				what:      fmt.Sprintf("Redis `gcra`, %d callers, 100k keys ÷ go-redis/redis_rate", c),
				floodgate: perSec(r), reference: perSec(p),
				ratio: r.sum.DecisionsPerSec / p.sum.DecisionsPerSec, atLeast: true, bound: 2,
			})
		}
	}
	for _, pair := range []struct{ serve, noop, what string }{
		{serveName, noopName, "`serve` on Redis, Envoy gRPC ÷ a no-op grpc-go RLS server"},
		{serveHTTPName, noopHTTPName, "`serve` on Redis, HTTP `/v1/allow` ÷ a no-op `net/http` handler"},
		{serveMemName, noopName, "`serve` on the memory store, Envoy gRPC ÷ a no-op grpc-go RLS server"},
		{serveMemHTTPName, noopHTTPName, "`serve` on the memory store, HTTP `/v1/allow` ÷ a no-op `net/http` handler"},
	} {
		for _, keys := range []int{100_000, 1} {
			for _, r := range serveRows {
				if r.lib != pair.serve || r.keys != keys || r.callers < 64 {
					continue
				}
				if p, ok := find(serveRows, pair.noop, r.keys, r.callers); ok {
					ts = append(ts, target{
						what:      fmt.Sprintf("%s, %d callers, %s", pair.what, r.callers, keysName(r.keys)),
						floodgate: perSec(r), reference: perSec(p),
						ratio: r.sum.DecisionsPerSec / p.sum.DecisionsPerSec, atLeast: true, bound: 0.8,
					})
				}
			}
		}
	}
	anyEnvoy := false
	for _, r := range serveRows {
		if r.lib != serveName || r.callers < 64 {
			continue
		}
		p, ok := find(serveRows, envoyName, r.keys, r.callers)
		if !ok {
			continue
		}
		anyEnvoy = true
		ts = append(ts, target{
			what:      fmt.Sprintf("`serve`, Envoy gRPC, %d callers, %s ÷ envoyproxy/ratelimit, decisions/s", r.callers, keysName(r.keys)),
			floodgate: perSec(r), reference: perSec(p),
			ratio: r.sum.DecisionsPerSec / p.sum.DecisionsPerSec, atLeast: true, bound: 2.5,
		}, target{
			what:      "the same, p99 latency",
			floodgate: loadgen.FormatMS(r.sum.LatencyMS.P99), reference: loadgen.FormatMS(p.sum.LatencyMS.P99),
			ratio: r.sum.LatencyMS.P99 / p.sum.LatencyMS.P99, bound: 0.5,
		})
	}
	// What the machine allows: the no-op gRPC server beside
	// envoyproxy/ratelimit on the same load. serve cannot answer faster
	// than a server that decides nothing, so a decisions/s target above
	// this ratio cannot be met here whatever serve does.
	var floors []string
	for _, r := range serveRows {
		if r.lib != noopName || r.callers < 64 {
			continue
		}
		if p, ok := find(serveRows, envoyName, r.keys, r.callers); ok {
			floors = append(floors, fmt.Sprintf("%.2f (%d callers, %s)", r.sum.DecisionsPerSec/p.sum.DecisionsPerSec, r.callers, keysName(r.keys)))
		}
	}
	if len(floors) > 0 {
		notes = append(notes, "the no-op gRPC server ÷ envoyproxy/ratelimit, decisions/s, the most any service reaches beside it on this machine: "+strings.Join(floors, ", "))
	}
	if !anyEnvoy {
		notes = append(notes, "no envoyproxy/ratelimit rows in this run (no `service_cmd` binary): its two targets are not measured")
	}
	for _, c := range []int{1, 64} {
		r, ok1 := find(memRows, "floodgate memstore gcra", 1, c)
		p, ok2 := find(memRows, "x/time/rate", 1, c)
		if ok1 && ok2 {
			ts = append(ts, target{
				what:      fmt.Sprintf("memory store `gcra`, one key, %d caller%s ÷ x/time/rate", c, plural(c)),
				floodgate: perSec(r), reference: perSec(p),
				ratio: r.sum.DecisionsPerSec / p.sum.DecisionsPerSec, atLeast: true, bound: 1,
			})
		}
	}

	fmt.Fprintf(out, "## Targets\n\n")
	fmt.Fprintf(out, "Each target beside what this run measured, computed from the rows below.\n\n")
	fmt.Fprintln(out, "| what | Floodgate | reference | ratio | target | met |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---|---|")
	for _, t := range ts {
		met := "no"
		if t.met() {
			met = "yes"
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.2f | %s | %s |\n", t.what, t.floodgate, t.reference, t.ratio, t.want(), met)
	}
	if len(notes) > 0 {
		fmt.Fprintf(out, "\n%s.\n", strings.Join(notes, "; "))
	}
	fmt.Fprintln(out)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
