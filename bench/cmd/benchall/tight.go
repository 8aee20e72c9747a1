package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate/bench"
	"github.com/floodgate-rl/floodgate/internal/loadgen"
)

// The one-key targets (the memory store beside x/time/rate) are measured
// as a Go benchmark measures a decision, and as the issue that set them
// did (Limiter.Allow 94 ns, x/time/rate 84 ns, from go test -bench): a
// loop of calls with nothing else in it. The embedded table's rows go
// through loadgen, which adds two clock reads, a random key and a
// histogram record to every call — about as much CPU as the decision
// itself on one key — so there the two libraries' figures are each half
// harness, and the ratio says more about the harness than about them.

// tightLibs are the libraries of the one-key targets, by bench.MemLibs
// name.
var tightLibs = []string{"floodgate memstore gcra", "x/time/rate"}

// tightCallers are the caller counts of the one-key targets.
var tightCallers = []int{1, 64}

// tightLoop calls allow(ctx, key) from callers goroutines, n/callers times
// each, growing n until a run lasts at least dur (as testing.B grows b.N),
// and returns the last run as a row: decisions/s from its wall time, CPU
// per decision from getrusage. The first error ends it.
func tightLoop(ctx context.Context, lib string, allow bench.AllowFunc, key string, callers int, dur time.Duration) (row, error) {
	run := func(n int) (time.Duration, time.Duration, error) {
		per := n / callers
		var wg sync.WaitGroup
		errs := make([]error, callers)
		start := make(chan struct{})
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range per {
					if _, err := allow(ctx, key); err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		cpu0, t0 := selfCPU(), time.Now()
		close(start)
		wg.Wait()
		return time.Since(t0), selfCPU() - cpu0, cmp.Or(errs...)
	}
	n := callers
	for {
		if err := ctx.Err(); err != nil {
			return row{}, err
		}
		wall, cpu, err := run(n)
		if err != nil {
			return row{}, fmt.Errorf("%s: %w", lib, err)
		}
		done := n / callers * callers
		if wall >= dur || n >= 1<<31 {
			return row{lib: lib, keys: 1, callers: callers,
				sum: loadgen.Summary{Target: lib, Callers: callers, Keys: 1, ElapsedSeconds: wall.Seconds(),
					Calls: int64(done), Decisions: int64(done), DecisionsPerSec: float64(done) / wall.Seconds()},
				cpuNs:  float64(cpu.Nanoseconds()) / float64(done),
				allocs: math.NaN(), scripts: math.NaN(), calls: math.NaN(), serviceCPU: math.NaN(), redisCPU: math.NaN(),
				failedOpen: -1,
			}, nil
		}
		// Aim 20% past dur, at most 100× the last n, as testing.B does.
		next := int(float64(n) * 1.2 * float64(dur) / float64(max(wall, time.Microsecond)))
		n = max(min(next, 100*n), n+callers)
	}
}

// tightRounds runs every tightLibs library at every tightCallers count on
// one key, rounds times interleaved, and returns for each the round of
// median decisions/s.
func tightRounds(ctx context.Context, allows map[string]bench.AllowFunc, key string, rounds int, dur time.Duration, logf func(string, ...any)) ([]row, error) {
	got := make(map[string][]row)
	for round := range rounds {
		for _, lib := range tightLibs {
			allow := allows[lib]
			if allow == nil {
				return nil, fmt.Errorf("one-key loop: no library %q", lib)
			}
			for _, c := range tightCallers {
				rw, err := tightLoop(ctx, lib, allow, key, c, dur)
				if err != nil {
					return nil, err
				}
				logf("one key, tight loop, round %d/%d: %s, %d callers: %.0f ns, %.0f cpu-ns", round+1, rounds, lib, c, 1e9/rw.sum.DecisionsPerSec, rw.cpuNs)
				k := fmt.Sprintf("%s/%d", lib, c)
				got[k] = append(got[k], rw)
			}
		}
	}
	var rows []row
	for _, lib := range tightLibs {
		for _, c := range tightCallers {
			rows = append(rows, medianRow(got[fmt.Sprintf("%s/%d", lib, c)]))
		}
	}
	return rows, nil
}

// writeTight writes the one-key loop's rows.
func writeTight(out io.Writer, rows []row, rounds int, dur time.Duration) {
	fmt.Fprintf(out, "## Embedded, one key, as `go test -bench` measures it (%d interleaved rounds of at least %v per row; each row the round of median decisions/s)\n\n", rounds, dur)
	fmt.Fprintf(out, "A loop of calls on one key with nothing else in it, from 1 or 64 goroutines; the one-key targets are computed from these rows. The table above, through the load generator, adds about as much per call as the decision costs.\n\n")
	fmt.Fprintln(out, "| library | callers | ns/decision | decisions/s | cpu-ns/decision |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(out, "| %s | %d | %.1f | %.0f | %.1f |\n", r.lib, r.callers, 1e9/r.sum.DecisionsPerSec, r.sum.DecisionsPerSec, r.cpuNs)
	}
	fmt.Fprintln(out)
}
