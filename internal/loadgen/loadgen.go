// Package loadgen sends rate limit decisions to a target as fast as it
// answers (closed loop) or at a fixed rate (open loop), and measures what
// came back: decisions per second, how many were admitted, denied or
// failed, and the latency distribution in an HDR histogram.
//
// It is the core of `floodgate bench` and of bench/cmd/benchall, so that a
// user measuring their own deployment and the benchmark table in
// BENCHMARKS.md count the same way:
//
//   - Each of Config.Callers goroutines has at most one call in flight.
//   - Config.Requests and Config.Duration both bound a run; the first
//     reached ends it. Every call issued is counted exactly once as OK,
//     OverLimit or an error, so OK+OverLimit+Errors is the number issued
//     (Config.Requests when the count bound ends the run). Calls in flight
//     when the duration ends are awaited, not cancelled.
//   - With Config.Rate the calls are scheduled at fixed intervals from the
//     start and each latency is measured from the call's scheduled time,
//     not from when a caller got to it, so a stalled target shows in the
//     latencies instead of slowing the load down (no coordinated omission).
//   - Keys are drawn uniformly at random from Config.Keys (one hot key when
//     it is 1); a share Config.Hot of calls uses the key index HotKey.
//
// The latency histogram holds every call counted, failed ones included.
// Latencies are recorded in nanoseconds with 3 significant digits, in a
// few histograms shared by the callers under a mutex each (one per caller
// would cost hundreds of kilobytes each at 256 callers).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/floodgate-rl/floodgate"
)

// Outcome is what the target answered to one call.
type Outcome int

const (
	// OK means the call was admitted.
	OK Outcome = iota
	// OverLimit means the call was denied.
	OverLimit
	// NoRule means the call was admitted because no rule limited it: no
	// descriptor matched a rule of its domain. It counts as OK, and in
	// Snapshot.NoRule: a load test of a config that limits nothing says so.
	NoRule
	// UnknownDomain is NoRule because the service does not have the
	// request's domain in its config (it said so); it counts as OK, in
	// Snapshot.NoRule and in Snapshot.UnknownDomain.
	UnknownDomain
	// FailedOpen means the service's store failed or timed out and its
	// failure mode admitted the call (fail_open, or local's own
	// decision): the answer is not the limit's. It counts as OK and in
	// Snapshot.StoreError.
	FailedOpen
	// FailedClosed means the store failed and the failure mode denied the
	// call (fail_closed). It counts as OverLimit and in
	// Snapshot.StoreError.
	FailedClosed
)

// HotKey is the key index a call gets when Config.Hot picks it; targets
// substitute "hot" for it.
const HotKey = -1

// CallFunc makes one call for the key with index key (0 to Config.Keys-1,
// or HotKey). Each CallFunc is used by one goroutine at a time. An error
// counts the call as failed, whatever the Outcome.
type CallFunc func(ctx context.Context, key int) (Outcome, error)

// Target makes the CallFunc of each caller.
type Target interface {
	// NewCaller returns the CallFunc of caller id (0 to Config.Callers-1).
	NewCaller(id int) (CallFunc, error)
}

// TargetFunc is a Target whose callers all share one CallFunc, which must
// then be safe for concurrent use.
type TargetFunc CallFunc

// NewCaller returns f.
func (f TargetFunc) NewCaller(int) (CallFunc, error) { return CallFunc(f), nil }

// Bounds of a Config, so that a mistyped flag fails clearly instead of
// exhausting the machine.
const (
	MaxCallers = 100_000
	MaxKeys    = 100_000_000
)

// Config is one run.
type Config struct {
	// Callers is the number of concurrent callers, each with at most one
	// call in flight.
	Callers int
	// Duration bounds the run in time; 0 means no time bound.
	Duration time.Duration
	// Requests bounds the run in calls; 0 means no count bound. At least
	// one of Duration and Requests must be set.
	Requests int64
	// Rate, if above zero, sends that many calls per second (open loop);
	// 0 sends each caller's next call when its last one returns.
	Rate float64
	// Keys is the number of distinct keys, drawn uniformly (1: one hot
	// key).
	Keys int
	// Hot is the share of calls, 0 to 1, that use key HotKey.
	Hot float64
	// Warmup, if above zero, runs the same load for that long before the
	// measured run, and discards what it measured.
	Warmup time.Duration
	// Progress, if set, is called with a snapshot every ProgressEvery
	// (default one second) while the measured run lasts.
	Progress func(Snapshot)
	// ProgressEvery is the interval of Progress.
	ProgressEvery time.Duration
	// Seed seeds the key choice; callers draw from distinct streams.
	Seed uint64
}

// Validate reports the first field of c that is out of range.
func (c *Config) Validate() error {
	switch {
	case c.Callers < 1 || c.Callers > MaxCallers:
		return invalid("callers", "%d is not between 1 and %d", c.Callers, MaxCallers)
	case c.Duration < 0:
		return invalid("duration", "%v is negative", c.Duration)
	case c.Requests < 0:
		return invalid("requests", "%d is negative", c.Requests)
	case c.Duration == 0 && c.Requests == 0:
		return errors.New("neither a duration nor a number of requests bounds the run")
	case c.Rate < 0:
		return invalid("rate", "%v is negative", c.Rate)
	case c.Keys < 1 || c.Keys > MaxKeys:
		return invalid("keys", "%d is not between 1 and %d", c.Keys, MaxKeys)
	case !(c.Hot >= 0 && c.Hot <= 1):
		return invalid("hot", "%v is not between 0 and 1", c.Hot)
	case c.Warmup < 0:
		return invalid("warmup", "%v is negative", c.Warmup)
	case c.ProgressEvery < 0:
		return invalid("progress_every", "%v is negative", c.ProgressEvery)
	}
	return nil
}

// invalid is the error of a field of a Config, found by errors.As as a
// *floodgate.FieldError, so that a caller names it as its users know it
// (a flag).
func invalid(field, format string, args ...any) error {
	return &floodgate.FieldError{Kind: floodgate.ErrInvalidRequest, Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Snapshot is the state of a run so far.
type Snapshot struct {
	Elapsed   time.Duration
	OK        int64
	OverLimit int64
	Errors    int64
	// NoRule counts the OK calls that no rule limited (see NoRule).
	NoRule int64
	// UnknownDomain counts the NoRule calls whose domain the service
	// does not have (see UnknownDomain).
	UnknownDomain int64
	// StoreError counts the calls the failure mode answered because the
	// service's store failed (FailedOpen and FailedClosed); they are also
	// in OK or OverLimit.
	StoreError int64
	// P99 is the 99th percentile latency of the calls finished so far.
	P99 time.Duration
}

// Total is the number of calls finished, failed ones included.
func (s Snapshot) Total() int64 { return s.OK + s.OverLimit + s.Errors }

// Decisions is the number of calls answered OK or OverLimit.
func (s Snapshot) Decisions() int64 { return s.OK + s.OverLimit }

// PerSecond is the rate of decisions (failed calls excluded) over the
// elapsed time.
func (s Snapshot) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Decisions()) / s.Elapsed.Seconds()
}

// Result is a finished run.
type Result struct {
	Snapshot
	// Hist holds the latency of every finished call, in nanoseconds.
	Hist *hdrhistogram.Histogram
	// FirstError is the first error a call returned, if any.
	FirstError error
}

const (
	histMax    = int64(time.Minute)
	histDigits = 3
	histShards = 16
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, histDigits) }

type shard struct {
	mu   sync.Mutex
	hist *hdrhistogram.Histogram
	_    [40]byte // keep shards on separate cache lines
}

type run struct {
	cfg     Config
	start   time.Time
	end     time.Time // zero: no time bound
	next    atomic.Int64
	ok      atomic.Int64
	over    atomic.Int64
	errs    atomic.Int64
	noRule  atomic.Int64
	unknown atomic.Int64
	failed  atomic.Int64
	shards  [histShards]shard
	errOnce sync.Once
	err     error
}

// Run runs cfg against t and returns what it measured. It returns early,
// with what was measured so far, when ctx ends; calls in flight then finish
// (each target bounds its own calls in time). It returns an error only when
// cfg is invalid or a caller cannot be made; failed calls are counted, not
// returned.
func Run(ctx context.Context, t Target, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	calls := make([]CallFunc, cfg.Callers)
	for i := range calls {
		f, err := t.NewCaller(i)
		if err != nil {
			return Result{}, fmt.Errorf("caller %d: %w", i, err)
		}
		calls[i] = f
	}
	if cfg.Warmup > 0 {
		w := cfg
		w.Duration, w.Requests, w.Progress, w.Warmup = cfg.Warmup, 0, nil, 0
		w.Seed = cfg.Seed + 1
		runOnce(ctx, calls, w)
	}
	return runOnce(ctx, calls, cfg), nil
}

func runOnce(ctx context.Context, calls []CallFunc, cfg Config) Result {
	r := &run{cfg: cfg, start: time.Now()}
	for i := range r.shards {
		r.shards[i].hist = newHist()
	}
	if cfg.Duration > 0 {
		r.end = r.start.Add(cfg.Duration)
	}
	stop := make(chan struct{})
	var progress sync.WaitGroup
	if cfg.Progress != nil {
		every := cfg.ProgressEvery
		if every == 0 {
			every = time.Second
		}
		progress.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					cfg.Progress(r.snapshot(nil))
				}
			}
		})
	}
	var wg sync.WaitGroup
	for id, call := range calls {
		wg.Go(func() { r.caller(ctx, id, call) })
	}
	wg.Wait()
	close(stop)
	progress.Wait()
	total := newHist()
	s := r.snapshot(total)
	return Result{Snapshot: s, Hist: total, FirstError: r.err}
}

// snapshot reads the counters and merges the histograms into into (a fresh
// one when nil).
func (r *run) snapshot(into *hdrhistogram.Histogram) Snapshot {
	if into == nil {
		into = newHist()
	}
	s := Snapshot{Elapsed: time.Since(r.start)}
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		into.Merge(sh.hist)
		sh.mu.Unlock()
	}
	s.OK, s.OverLimit, s.Errors, s.NoRule = r.ok.Load(), r.over.Load(), r.errs.Load(), r.noRule.Load()
	s.UnknownDomain, s.StoreError = r.unknown.Load(), r.failed.Load()
	s.P99 = time.Duration(into.ValueAtQuantile(99))
	return s
}

func (r *run) caller(ctx context.Context, id int, call CallFunc) {
	cfg := &r.cfg
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)))
	sh := &r.shards[id%histShards]
	// Calls are not cancelled with ctx (an interrupted run still counts
	// every call it issued); ctx only stops new calls.
	callCtx := context.WithoutCancel(ctx)
	var interval float64
	if cfg.Rate > 0 {
		interval = float64(time.Second) / cfg.Rate
	}
	for {
		if ctx.Err() != nil {
			return
		}
		n := r.next.Add(1) // this call's ticket, from 1
		if cfg.Requests > 0 && n > cfg.Requests {
			return
		}
		t0 := time.Now()
		if interval > 0 {
			// The ticket's scheduled time; the latency counts from it.
			at := r.start.Add(time.Duration(float64(n-1) * interval))
			if !r.end.IsZero() && !at.Before(r.end) {
				return
			}
			if wait := time.Until(at); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			t0 = at
		} else if !r.end.IsZero() && !t0.Before(r.end) {
			return
		}
		key := 0
		switch {
		case cfg.Hot > 0 && rng.Float64() < cfg.Hot:
			key = HotKey
		case cfg.Keys > 1:
			key = rng.IntN(cfg.Keys)
		}
		out, err := call(callCtx, key)
		lat := time.Since(t0)
		switch {
		case err != nil:
			r.errs.Add(1)
			r.errOnce.Do(func() { r.err = err })
		case out == OK:
			r.ok.Add(1)
		case out == NoRule:
			r.ok.Add(1)
			r.noRule.Add(1)
		case out == UnknownDomain:
			r.ok.Add(1)
			r.noRule.Add(1)
			r.unknown.Add(1)
		case out == FailedOpen:
			r.ok.Add(1)
			r.failed.Add(1)
		case out == FailedClosed:
			r.over.Add(1)
			r.failed.Add(1)
		default:
			r.over.Add(1)
		}
		sh.mu.Lock()
		_ = sh.hist.RecordValue(min(max(int64(lat), 1), histMax))
		sh.mu.Unlock()
	}
}
