package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/store/redisstore"
)

const (
	// timeout is every Limiter's Timeout: the deadline of one store call.
	timeout = 100 * time.Millisecond
	// slack is what a call may take past its deadline, beyond the stall
	// the load's probes measured in the process itself, before the test
	// calls it an overrun.
	slack = 100 * time.Millisecond
	// maxStall is the stall above which a run says nothing about latency:
	// when the control group itself returns this late, the host (7 jobs
	// on 2 cores, say) decides how long a call takes, not the store.
	// Then the latency bounds are reported, not asserted; every other
	// bound still is.
	maxStall = 50 * time.Millisecond
	// tick paces each load worker: one call per tick at most.
	tick = 2 * time.Millisecond
	// maxLoad bounds every load run, whatever the test waits for.
	maxLoad = 30 * time.Second
)

// instance is one application instance: a Limiter over a Store with a
// client (and connections) of its own.
type instance struct {
	lim    *floodgate.Limiter
	store  *redisstore.Store
	policy floodgate.FailurePolicy
}

// instances opens n stores on url, alternately FailOpen and FailClosed, all
// with the same key prefix, and closes them when the test ends.
func instances(t *testing.T, url string, n int) []instance {
	t.Helper()
	return instancesWith(t, url, n, redisstore.Options{})
}

// instancesWith is instances with each store's options (the prefix is
// always "faults").
func instancesWith(t *testing.T, url string, n int, opts redisstore.Options) []instance {
	t.Helper()
	return instancesTimeout(t, url, n, opts, timeout)
}

// instancesTimeout is instancesWith with the Limiters' store deadline.
func instancesTimeout(t *testing.T, url string, n int, opts redisstore.Options, timeout time.Duration) []instance {
	t.Helper()
	opts.Prefix = "faults"
	out := make([]instance, n)
	for i := range out {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		s, err := redisstore.Open(ctx, url, &opts)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		policy := floodgate.FailOpen
		if i%2 == 1 {
			policy = floodgate.FailClosed
		}
		lim, err := floodgate.New(s, &floodgate.Options{FailurePolicy: policy, Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = instance{lim: lim, store: s, policy: policy}
	}
	return out
}

// call is one Allow as its caller saw it.
type call struct {
	inst       int
	key        string
	start, end time.Time
	allowed    bool
	err        error
	now        time.Time // Decision.Now: the store's time, when err is nil
}

func (c call) latency() time.Duration { return c.end.Sub(c.start) }

// load runs Allow calls on several goroutines until stopped, and records
// every call.
type load struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	calls []call
	stall time.Duration
}

// keyFunc picks the key of a worker's i-th call.
type keyFunc func(worker, i int) string

// keysOf cycles through keys.
func keysOf(keys ...string) keyFunc {
	return func(w, i int) string { return keys[(w+i)%len(keys)] }
}

// startLoad starts workers goroutines, each calling Allow on the instances
// in turn, once per tick, until Stop or maxLoad. The Stop is registered as
// a cleanup too.
func startLoad(t *testing.T, insts []instance, workers int, key keyFunc, limit floodgate.Limit) *load {
	t.Helper()
	l := &load{stop: make(chan struct{})}
	end := time.Now().Add(maxLoad)
	for w := range workers {
		l.wg.Go(func() {
			ticker := time.NewTicker(tick)
			defer ticker.Stop()
			for i := 0; time.Now().Before(end); i++ {
				select {
				case <-l.stop:
					return
				case <-ticker.C:
				}
				inst := (w + i) % len(insts)
				// The caller's own deadline, fixed at the start, so that a
				// stall before the Limiter sets its own (same) Timeout
				// does not move the deadline the latency is held to.
				c := call{inst: inst, key: key(w, i), start: time.Now()}
				ctx, cancel := context.WithDeadline(context.Background(), c.start.Add(timeout))
				d, err := insts[inst].lim.Allow(ctx, c.key, limit)
				c.end = time.Now()
				cancel()
				c.allowed, c.err, c.now = d.Allowed, err, d.Now
				l.mu.Lock()
				l.calls = append(l.calls, c)
				l.mu.Unlock()
			}
		})
	}
	for range workers {
		l.wg.Go(func() { l.probe(end) })
	}
	t.Cleanup(l.Stop)
	return l
}

// probe is the control group of the load: a caller whose store does
// nothing but hand it the end of the call's deadline through another
// goroutine, as a client hands a caller its reply or its connection (in
// rueidis a caller may wait for another caller's dial, bounded by that
// caller's deadline), again and again. How late it returns is how late a store that honours
// the deadline perfectly would return on this host at this moment: timers
// fire late and goroutines wait for a CPU when the cores are shared, more
// so under -race. startLoad runs one probe per worker.
func (l *load) probe(end time.Time) {
	for time.Now().Before(end) {
		// Lateness does not depend on the length of the wait; a short one
		// samples the host often.
		const wait = 5 * time.Millisecond
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		handed := make(chan struct{})
		go func() {
			<-ctx.Done()
			close(handed)
		}()
		select {
		case <-l.stop:
			cancel()
			<-handed
			return
		case <-handed:
		}
		cancel()
		late := time.Since(start) - wait
		l.mu.Lock()
		l.stall = max(l.stall, late)
		l.mu.Unlock()
	}
}

// Stall is the most a probe returned after its deadline.
func (l *load) Stall() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stall
}

// Stop ends the load and waits for every worker. It may be called again.
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// Calls returns the calls recorded so far.
func (l *load) Calls() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

// count counts the recorded calls that match.
func (l *load) count(match func(call) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if match(c) {
			n++
		}
	}
	return n
}

// waitFor polls cond every 5 ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // polling an external process
	}
}

// stats is what a run of calls amounts to.
type stats struct {
	stall         time.Duration // see load.Stall
	slowest       call          // the call that took longest
	calls, errors int
	maxLatency    time.Duration
	// wrongPolicy counts failed calls whose decision was not their
	// policy's: allowed under FailClosed or denied under FailOpen.
	wrongPolicy int
	// uncounted counts calls allowed by FailOpen without the store.
	uncounted int
	// noscript counts errors that mention NOSCRIPT, which callers must
	// never see.
	noscript int
	// deadlines counts errors that are the call's deadline.
	deadlines int
}

func measure(l *load, insts []instance) stats {
	s := stats{stall: l.Stall()}
	for _, c := range l.Calls() {
		s.calls++
		if c.latency() > s.maxLatency {
			s.maxLatency, s.slowest = c.latency(), c
		}
		if c.err == nil {
			continue
		}
		s.errors++
		if errors.Is(c.err, context.DeadlineExceeded) {
			s.deadlines++
		}
		if strings.Contains(c.err.Error(), "NOSCRIPT") {
			s.noscript++
		}
		if c.allowed != (insts[c.inst].policy == floodgate.FailOpen) {
			s.wrongPolicy++
		}
		if c.allowed {
			s.uncounted++
		}
	}
	return s
}

// windows counts the calls the store admitted per key and fixed window
// (from Decision.Now), and returns the total admitted above limit and the
// largest count of one window. inFault reports whether a window's start
// (µs) lies in the fault's span; outside it every window must be within
// the limit, which badWindows counts.
func windows(calls []call, limit floodgate.Limit, inFault func(start time.Time) bool) (overrun, maxWindow int64, badWindows int) {
	per := make(map[string]int64)
	periodUS := limit.Period.Microseconds()
	for _, c := range calls {
		if c.err != nil || !c.allowed {
			continue
		}
		us := c.now.UnixMicro()
		per[c.key+"@"+strconv.FormatInt(us-us%periodUS, 10)]++
	}
	for k, n := range per {
		maxWindow = max(maxWindow, n)
		if n > limit.Limit {
			overrun += n - limit.Limit
			startUS, _ := strconv.ParseInt(k[strings.LastIndexByte(k, '@')+1:], 10, 64)
			if inFault == nil || !inFault(time.UnixMicro(startUS)) {
				badWindows++
			}
		}
	}
	return overrun, maxWindow, badWindows
}

// span returns a function reporting whether a window starting at start
// overlaps [from, to].
func span(from, to time.Time, period time.Duration) func(time.Time) bool {
	return func(start time.Time) bool {
		return !start.Add(period).Before(from) && !start.After(to)
	}
}

// recovery returns, per instance, the end of its first successful call
// that started after t0, and the number of its calls that failed after
// that success (each must be zero).
func recovery(calls []call, n int, t0 time.Time) (first []time.Time, errsAfter []call) {
	first = make([]time.Time, n)
	for _, c := range calls {
		if c.err == nil && !c.start.Before(t0) && (first[c.inst].IsZero() || c.end.Before(first[c.inst])) {
			first[c.inst] = c.end
		}
	}
	for _, c := range calls {
		if c.err != nil && !first[c.inst].IsZero() && c.start.After(first[c.inst]) {
			errsAfter = append(errsAfter, c)
		}
	}
	return first, errsAfter
}

// afterRecovery logs the first few calls that failed after recovery, and
// counts those that failed for another reason than their deadline, and
// those that ran out of time. A deadline met after recovery says the
// process or Redis was slow (the host is shared), not that the fault
// lingers, and so does a WAIT that timed out (ErrNotReplicated, the
// replica slow to acknowledge); any other error (NOSCRIPT, a broken
// connection) does.
func afterRecovery(t *testing.T, t0 time.Time, errsAfter []call) (other, deadline int) {
	t.Helper()
	for i, c := range errsAfter {
		if i < 5 {
			t.Logf("instance %d failed %v after the fault ended, having recovered: %v", c.inst, c.start.Sub(t0), c.err)
		}
		if errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, redisstore.ErrNotReplicated) {
			deadline++
		} else {
			other++
		}
	}
	return other, deadline
}

// maxGap returns, for the instance that waited longest, the longest time
// between the ends of two consecutive successful calls that ended after
// from: the time without service.
func maxGap(calls []call, n int, from time.Time) time.Duration {
	last := make([]time.Time, n)
	var gap time.Duration
	for _, c := range calls { // in the order they were recorded: by end
		if c.err != nil || c.end.Before(from) {
			continue
		}
		if !last[c.inst].IsZero() {
			gap = max(gap, c.end.Sub(last[c.inst]))
		}
		last[c.inst] = c.end
	}
	return gap
}

// latest is the last of ts, or the zero time if any is zero.
func latest(ts []time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.IsZero() {
			return time.Time{}
		}
		if t.After(out) {
			out = t
		}
	}
	return out
}

// info returns the fields of INFO section on s.
func info(t *testing.T, s *redistest.Server, section string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	out, err := s.CLI(ctx, "INFO", section)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
