package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const (
	// flushWorkers reserve and commit flushPairs times each under a
	// flush; every fourth commit is sent twice at once, from two
	// instances.
	flushWorkers = 8
	flushPairs   = 60
	// flushEvery paces the flushes, at most maxFlushes of them.
	flushEvery = 200 * time.Microsecond
	maxFlushes = 20000
	// retryFor bounds how long a caller retries a reserve, or a commit,
	// of one hold after a failure: longer than the flushes last
	// (maxFlushes × flushEvery), so that every call is answered in the
	// end however often the flushes beat the reloads (each call reloads at
	// most three times; how often a reload loses the race depends on the
	// machine and the library's size).
	retryFor = 2*maxFlushes*flushEvery + 5*time.Second
	// flushTimeout is each call's deadline and the Limiters' store
	// deadline (Options.Timeout). What these tests assert is
	// that a flush is never seen and every hold settles once, not how fast
	// Redis reloads: under FUNCTION FLUSH every call reloads the library
	// (184 kB; 6 ms of Redis's CPU per FUNCTION LOAD here), up to three
	// times, 32 callers at once, and on a 2-core host with another
	// package's tests beside it 10-20% of the calls passed the faults'
	// usual 100 ms (`timeout`) in code before and after the library grew
	// alike (measured beside two busy loops: 122-291 of about 1,300 calls
	// before, 129-225 after), while the test process itself stalled under
	// the 50 ms that excuses a loaded host. A second is room for the
	// reloads (beside the same two busy loops: 0 calls past it in 5 runs,
	// the slowest call 147-240 ms), and the 2% bound against it still
	// fails a reload that never ends.
	flushTimeout = time.Second
)

// retry calls f until it succeeds or retryFor has passed since the first
// call, and returns its last error.
func retry(f func() error) error {
	start := time.Now()
	for {
		err := f()
		if err == nil || time.Since(start) > retryFor {
			return err
		}
	}
}

// settleLimits are the limits of the keys whose count the flush tests
// read after the load: a minute from the first hit, and a trailing
// minute, so that the run stays in one window and each key's count is
// what the commits left. There is room for every hold.
var settleLimits = []floodgate.Limit{
	{Algorithm: floodgate.FixedWindow, Window: floodgate.FirstHit, Limit: 1000, Period: time.Minute},
	{Algorithm: floodgate.SlidingWindowLog, Limit: 1000, Period: time.Minute},
}

// TestFaultReserveScriptFlush reserves and commits from four instances
// while SCRIPT FLUSH empties Redis's script cache every 200 µs: a call
// that finds its script gone (NOSCRIPT) did not run it and is sent again
// with EVAL, which no caller sees, and every hold is settled exactly once.
func TestFaultReserveScriptFlush(t *testing.T) {
	reserveFlush(t, "SCRIPT FLUSH", redisstore.Options{})
}

// TestFaultReserveFunctionFlush is TestFaultReserveScriptFlush with the
// scripts run as Redis functions (redisstore.Options.Functions) and
// FUNCTION FLUSH removing their library every 200 µs: a call that finds
// its function missing did not run it, loads the library again and calls
// again.
func TestFaultReserveFunctionFlush(t *testing.T) {
	reserveFlush(t, "FUNCTION FLUSH", redisstore.Options{Functions: true})
}

// flushCall is a reserve or commit of the flush tests as its caller saw it.
type flushCall struct {
	start, end time.Time
	err        error
}

func reserveFlush(t *testing.T, flush string, opts redisstore.Options) {
	r := redistest.Standalone(t)
	insts := instancesTimeout(t, "redis://"+r.Addr, 4, opts, flushTimeout)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type target struct {
		key   string
		limit floodgate.Limit
	}
	var targets []target
	for i, lim := range settleLimits {
		for _, k := range []string{"x", "y"} {
			targets = append(targets, target{k + strconv.Itoa(i), lim})
		}
	}

	// The flushes, and probes of the host's stall beside them.
	probes := &load{stop: make(chan struct{})}
	end := time.Now().Add(maxLoad)
	for range flushWorkers {
		probes.wg.Go(func() { probes.probe(end) })
	}
	defer probes.Stop()
	var flushes atomic.Int64
	var flushErr atomic.Value
	probes.wg.Go(func() {
		ticker := time.NewTicker(flushEvery)
		defer ticker.Stop()
		for flushes.Load() < maxFlushes && time.Now().Before(end) {
			select {
			case <-probes.stop:
				return
			case <-ticker.C:
			}
			cmd := c.B().ScriptFlush().Build()
			if opts.Functions {
				cmd = c.B().FunctionFlush().Build()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := c.Do(ctx, cmd).Error()
			cancel()
			if err != nil {
				flushErr.Store(err)
				continue
			}
			flushes.Add(1)
		}
	})

	// Each worker's calls, the units its acknowledged commits left per
	// target, and the commits sent twice that settled twice or answered
	// differently.
	type result struct {
		calls                   []flushCall
		want                    []int64
		holds, denied, twice    int
		doubled, differ, cancel int
		unsettled               int
		lastErr                 error
	}
	results := make([]result, flushWorkers)
	var wg sync.WaitGroup
	for w := range flushWorkers {
		wg.Go(func() {
			res := &results[w]
			res.want = make([]int64, len(targets))
			var mu sync.Mutex // res.calls, for the commits sent twice
			timed := func(f func(ctx context.Context) error) error {
				fc := flushCall{start: time.Now()}
				ctx, cancel := context.WithDeadline(context.Background(), fc.start.Add(flushTimeout))
				fc.err = f(ctx)
				fc.end = time.Now()
				cancel()
				mu.Lock()
				res.calls = append(res.calls, fc)
				mu.Unlock()
				return fc.err
			}
			for i := range flushPairs {
				tg, inst := (w+i)%len(targets), (w+i)%len(insts)
				id := fmt.Sprintf("f%d-%d", w, i)
				// A reserve that failed may have run (one that met its
				// deadline): the caller reserves again with the same ID,
				// and gets the first answer if it did.
				var rv *floodgate.Reservation
				err := retry(func() error {
					return timed(func(ctx context.Context) error {
						var err error
						rv, _, err = insts[inst].lim.Reserve(ctx, targets[tg].key, targets[tg].limit, resCost, &floodgate.ReserveOptions{ID: id})
						return err
					})
				})
				if err != nil {
					res.unsettled++
					res.lastErr = err
					continue
				}
				if !rv.Held {
					res.denied++
					continue
				}
				res.holds++
				// 0 to resCost units; every other hold with nothing used is
				// cancelled instead.
				actual := int64(w*7+i) % (resCost + 1)
				cancelIt := actual == 0 && i%2 == 0
				// settle commits (or cancels) through rv, again after a
				// failure, as a caller retries, for at most retryFor.
				settle := func(rv *floodgate.Reservation) ([]floodgate.Settlement, error) {
					var sts []floodgate.Settlement
					err := retry(func() error {
						return timed(func(ctx context.Context) error {
							var err error
							if cancelIt {
								sts, err = rv.Cancel(ctx)
							} else {
								sts, err = rv.Commit(ctx, actual)
							}
							return err
						})
					})
					return sts, err
				}
				if cancelIt {
					res.cancel++
				}
				if i%4 != 0 {
					if _, err := settle(rv); err != nil {
						res.unsettled++
						res.lastErr = err
						continue
					}
					res.want[tg] += actual
					continue
				}
				// The same commit from another instance at once, as a
				// retry that raced the first: one settles, the other
				// answers its settlement.
				res.twice++
				other := insts[(inst+1)%len(insts)].lim.Reservation(id, rv.Items, false)
				var (
					sts  [2][]floodgate.Settlement
					errs [2]error
					both sync.WaitGroup
				)
				for j, x := range []*floodgate.Reservation{rv, other} {
					both.Go(func() { sts[j], errs[j] = settle(x) })
				}
				both.Wait()
				if err := cmp.Or(errs[0], errs[1]); err != nil {
					res.unsettled++
					res.lastErr = err
					continue
				}
				// Both may answer Replayed, when an attempt that met its
				// deadline had settled the hold; never both not.
				if !sts[0][0].Replayed && !sts[1][0].Replayed {
					res.doubled++
				}
				if sts[0][0].Refunded != sts[1][0].Refunded {
					res.differ++
				}
				res.want[tg] += actual
			}
		})
	}
	wg.Wait()
	probes.Stop()
	if v := flushErr.Load(); v != nil {
		t.Logf("a %s failed: %v", flush, v)
	}

	var calls, errs, deadlines, noscripts, notRun, holds, denied, twice, doubled, differ, cancels, unsettled int
	var maxLatency time.Duration
	want := make([]int64, len(targets))
	for _, res := range results {
		for _, fc := range res.calls {
			calls++
			maxLatency = max(maxLatency, fc.end.Sub(fc.start))
			if fc.err == nil {
				continue
			}
			if errs < 3 || !strings.HasSuffix(fc.err.Error(), "Function not found") {
				t.Logf("a call failed under %s: %v", flush, fc.err)
			}
			errs++
			if strings.Contains(fc.err.Error(), "NOSCRIPT") {
				noscripts++
			}
			if errors.Is(fc.err, context.DeadlineExceeded) {
				deadlines++
			}
			if strings.HasSuffix(fc.err.Error(), "Function not found") {
				notRun++
			}
		}
		holds += res.holds
		denied += res.denied
		twice += res.twice
		doubled += res.doubled
		differ += res.differ
		cancels += res.cancel
		unsettled += res.unsettled
		if res.lastErr != nil {
			t.Logf("a reservation left unanswered or unsettled: %v", res.lastErr)
		}
		for i, n := range res.want {
			want[i] += n
		}
	}
	if unsettled > 0 {
		t.Errorf("%d reservations not answered, or not settled, after retrying for %v", unsettled, retryFor)
	}
	if differ > 0 {
		t.Errorf("%d commits sent twice at once answered different refunds", differ)
	}
	var mismatch, maxCount int64
	var counts []string
	for i, tg := range targets {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		d, err := insts[0].lim.Peek(ctx, tg.key, tg.limit)
		cancel()
		if err != nil {
			t.Fatalf("peek at %s: %v", tg.key, err)
		}
		count := tg.limit.Limit - d.Remaining
		if count != want[i] {
			t.Errorf("%s (%s): count %d after the load, the commits left %d", tg.key, tg.limit.Algorithm, count, want[i])
		}
		mismatch += absDiff(count, want[i])
		maxCount = max(maxCount, count)
		counts = append(counts, fmt.Sprintf("%s %d", tg.limit.Algorithm, count))
	}

	// The fault was there, and the stores recovered from it.
	var recovered string
	if opts.Functions {
		loads := redistest.ParseCommandStats(r.MustCLI(t, "INFO", "commandstats"))["function|load"].Calls
		if loads < 2 {
			t.Errorf("FUNCTION LOAD ran %d times under FUNCTION FLUSH: the reload was not exercised", loads)
		}
		recovered = fmt.Sprintf("the stores loaded the library again %d times", loads)
	} else {
		n := strings.TrimPrefix(info(t, r, "errorstats")["errorstat_NOSCRIPT"], "count=")
		if n == "" {
			t.Error("Redis never answered NOSCRIPT under SCRIPT FLUSH: the fallback to EVAL was not exercised")
		}
		recovered = fmt.Sprintf("Redis answered NOSCRIPT %s times", n)
	}
	if flushes.Load() == 0 {
		t.Fatalf("%s never ran", flush)
	}
	failed := fmt.Sprintf("%d of %d reserve and commit calls failed (%d met their deadline on the loaded host", errs, calls, deadlines)
	if notRun > 0 {
		failed += fmt.Sprintf("; %d found the library flushed again after each of the three reloads a call waits for, "+
			"and failed with \"Function not found\", having run nothing", notRun)
	}
	failed += "), each retried with its reservation's ID"
	record(t, Row{
		Fault: fmt.Sprintf("%s every 200 µs while 8 goroutines reserve and commit through 4 instances", flush),
		Saw: fmt.Sprintf("%s; %d holds (%d reserves denied), %d of them cancelled, %d committed twice at once from two instances, of which %d settled twice; "+
			"each key's count after the load is what its commits left, the sum of their actual costs (%s; %d units off); "+
			"%s ran %d times and %s; no caller saw NOSCRIPT; max latency %s against a %s deadline (process stalled up to %s)",
			failed, holds, denied, cancels, twice, doubled, strings.Join(counts, ", "), mismatch,
			flush, flushes.Load(), recovered, ms(maxLatency), ms(flushTimeout), ms(probes.Stall())),
		Calls: calls, Errors: errs, Deadlines: deadlines,
		TimeoutMS: msf(flushTimeout), MaxLatencyMS: msf(maxLatency), StallMS: msf(probes.Stall()),
		NoScript: noscripts, RecoveryMS: -1,
		Limit: settleLimits[0].Limit, MaxWindow: maxCount, DoubleCounted: doubled,
		Holds: holds, SettleMismatch: mismatch, NotRun: notRun,
	})
}
