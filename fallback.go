package floodgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultProbeInterval is how long a Fallback decides locally after a
// failure of the shared store before it lets one call try the store again.
const DefaultProbeInterval = time.Second

// FallbackOptions configure a Fallback.
type FallbackOptions struct {
	// Local is the in-process store that decides while the shared store is
	// failing, usually memstore.New(nil); required.
	Local Store
	// Instances is the number of instances sharing the shared store, each
	// with its own Fallback, which every limit is divided by; at least 1.
	Instances int
	// ProbeInterval is how long the breaker stays open after a failure
	// before one call probes the shared store; 0 means
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// Clock times the probe interval; nil means the process clock.
	Clock Clock
}

// Fallback is the circuit breaker and local store behind FailLocal. A
// Limiter with FailLocal makes its own; a service that decides at the Store
// level (package server) uses one directly: ask UseLocal before calling the
// shared store, Report its answer, and decide in Apply when UseLocal said
// so or the store failed. It is safe for concurrent use.
//
// The breaker is closed while the shared store answers: every call goes to
// it. A store failure (an error other than an invalid request or a
// cancelled context, a timeout included) opens it for ProbeInterval, during
// which every call is decided locally at once, without waiting on the
// store. Then the first call to come is the probe: it alone tries the
// store (and may wait up to the store deadline), while the others keep
// deciding locally; an answer closes the breaker, a failure opens it for
// another interval. So while the store is down, at most one call per
// interval per instance waits for the deadline, and the instance is back on
// the store within one interval of its recovery. The trade-off: a
// shorter interval finds the store sooner but makes more callers wait on a
// dead store; probing with real calls (rather than a background ping) needs
// no goroutine and tests the very operation that failed.
//
// What this costs in accuracy: local state is never written to the shared
// store, nor the other way round. While the breaker is open, the fleet
// admits at most Instances × Share(limit) per window, which is at most the
// limit (up to Instances when the limit is below Instances, since each
// share is at least 1). On each change of side a key's count restarts from
// what that side holds: the local store starts empty (or, after an earlier
// outage in the same window, where that outage left it), and back on the
// store the count is what it was before the failure (or nothing after a
// restart without persistence). So a window that spans a handover admits
// up to one extra limit, the store's count plus the fleet's local shares;
// more precisely, in any span of time the fleet admits at most twice what
// the limit allows (once through the store, once through the local
// shares; for TokenBucket and GCRA, one burst plus the rate over the span,
// twice), plus whatever a restart of the store made it forget. Instances
// is what keeps the local part within the limit: a count below the real
// fleet size multiplies the local budget.
//
// A Concurrency lease lives on the side that granted it: released after
// the breaker changed state, it is released on the other side, where it
// is unknown (harmless), and holds its units until it expires after the
// limit's Period. Limiter.Reset forgets a key in the shared store only.
type Fallback struct {
	local     Store
	instances int64
	probe     time.Duration
	clock     Clock

	// openUntil is the end of the open state, in ns since the epoch by
	// clock; 0 while closed.
	openUntil atomic.Int64
	// probing is set while one call tries the store after the interval.
	probing atomic.Bool
}

// NewFallback returns a Fallback with a closed breaker.
func NewFallback(o FallbackOptions) (*Fallback, error) {
	if err := checkFallback("NewFallback", o.Local, o.Instances, o.ProbeInterval); err != nil {
		return nil, err
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	return &Fallback{local: o.Local, instances: int64(o.Instances), probe: o.ProbeInterval, clock: o.Clock}, nil
}

// checkFallback reports every problem of a Fallback's fields at once, each
// prefixed with the function the caller called (fn) and named as both
// FallbackOptions and Options spell it.
func checkFallback(fn string, local Store, instances int, probe time.Duration) error {
	var errs []error
	if local == nil {
		errs = append(errs, fmt.Errorf("floodgate: %s: Local: nil; failure policy local needs a local store (memstore.New)", fn))
	}
	if instances < 1 {
		errs = append(errs, fmt.Errorf("floodgate: %s: Instances: %d, but failure policy local needs the number of instances sharing the store (at least 1)", fn, instances))
	}
	if probe < 0 {
		errs = append(errs, fmt.Errorf("floodgate: %s: ProbeInterval: negative %v", fn, probe))
	}
	return errors.Join(errs...)
}

// newLimiterFallback is the Fallback of a Limiter's options: nil unless
// FailLocal, whose fields it checks, naming them as Options spells them.
func newLimiterFallback(o *Options) (*Fallback, error) {
	if o.FailurePolicy != FailLocal {
		if o.Local != nil || o.Instances != 0 || o.ProbeInterval != 0 {
			return nil, fmt.Errorf("floodgate: New: Local, Instances and ProbeInterval are for failure policy local, not %s", o.FailurePolicy)
		}
		return nil, nil
	}
	if err := checkFallback("New", o.Local, o.Instances, o.ProbeInterval); err != nil {
		return nil, err
	}
	return NewFallback(FallbackOptions{Local: o.Local, Instances: o.Instances, ProbeInterval: o.ProbeInterval, Clock: o.Clock})
}

// Share is limit as each of instances instances holds it on its own:
// Limit, and Burst for TokenBucket and GCRA, divided by instances and
// rounded down, so the fleet never admits more than the whole; but at
// least 1, so an instance of a fleet larger than the limit still admits
// something (the fleet then admits up to instances per window, not
// limit). A limit of 0 stays 0. Concurrency limits are divided the same
// way: each instance holds its share of leases. Share(limit, 1) is limit.
//
// 100 per minute over 3 instances is 33 per minute each; a token bucket of
// 10 per second with burst 25 over 4 instances is 2 per second, burst 6.
func Share(limit Limit, instances int) Limit {
	if instances <= 1 {
		return limit
	}
	n := int64(instances)
	if limit.Limit > 0 {
		limit.Limit = max(1, limit.Limit/n)
	}
	if limit.Burst > 0 {
		limit.Burst = max(1, limit.Burst/n)
	}
	return limit
}

// Instances is the number of instances the Fallback divides limits by.
func (f *Fallback) Instances() int { return int(f.instances) }

// UseLocal reports whether a call should be decided locally without asking
// the shared store: true while the breaker is open, except for the one
// call per interval that it lets probe the store. A caller that gets false
// must Report the store's answer.
func (f *Fallback) UseLocal() bool {
	until := f.openUntil.Load()
	if until == 0 {
		return false
	}
	if f.clock.Now().UnixNano() < until {
		return true
	}
	if !f.probing.CompareAndSwap(false, true) {
		return true
	}
	// A probe that failed between the Load above and the CAS opened the
	// breaker again (Report stores openUntil before it clears probing):
	// this call is not a second probe of the same interval.
	if f.clock.Now().UnixNano() < f.openUntil.Load() {
		f.probing.Store(false)
		return true
	}
	return false
}

// Report tells the breaker how the shared store answered: nil closes it; a
// store failure opens it for the probe interval. An invalid request or
// limit (ErrInvalidRequest, ErrInvalidLimit) or a cancelled context says
// nothing about the store and leaves it as it was. Report returns whether
// err is a store failure, which the caller should decide locally.
func (f *Fallback) Report(err error) bool {
	switch {
	case err == nil:
		f.openUntil.Store(0)
		f.probing.Store(false)
		return false
	case !IsStoreFailure(err):
		f.probing.Store(false)
		return false
	}
	f.openUntil.Store(max(1, f.clock.Now().Add(f.probe).UnixNano()))
	f.probing.Store(false)
	return true
}

// Open reports whether the breaker is open: the last answer of the shared
// store was a failure.
func (f *Fallback) Open() bool { return f.openUntil.Load() != 0 }

// IsStoreFailure reports whether err, returned by a store, means the store
// failed (is unreachable, timed out, answered wrongly) rather than that the
// request was invalid or its caller gave up.
func IsStoreFailure(err error) bool {
	return err != nil && !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, ErrInvalidLimit) && !errors.Is(err, context.Canceled)
}

// Apply decides r in the local store with this instance's share of its
// limit (see Share), and marks the decision Fallback. ctx should be the
// caller's, not one whose store deadline has passed.
func (f *Fallback) Apply(ctx context.Context, r Request) (Decision, error) {
	r.Limit = Share(r.Limit, int(f.instances))
	if !r.Limit.valid() {
		return Decision{}, fmt.Errorf("floodgate: local fallback: the share of %s over %d instances: %w", r.Limit, f.instances, r.Limit.Validate())
	}
	d, err := f.local.Apply(ctx, r)
	if err != nil {
		return Decision{}, fmt.Errorf("floodgate: local fallback: %w", err)
	}
	d.Fallback = true
	return d, nil
}

// ApplyBatch decides rs in the local store like Apply, all or nothing when
// the local store is a Batcher (memstore is), else one by one.
func (f *Fallback) ApplyBatch(ctx context.Context, rs []Request) ([]Decision, error) {
	local := make([]Request, len(rs))
	for i, r := range rs {
		r.Limit = Share(r.Limit, int(f.instances))
		if !r.Limit.valid() {
			return nil, fmt.Errorf("floodgate: local fallback: the share of %s over %d instances: %w", r.Limit, f.instances, r.Limit.Validate())
		}
		local[i] = r
	}
	ds, err := applyBatch(ctx, f.local, local)
	if err != nil {
		return nil, fmt.Errorf("floodgate: local fallback: %w", err)
	}
	for i := range ds {
		ds[i].Fallback = true
	}
	return ds, nil
}

// applyFallback is Limiter.apply under FailLocal: the store unless the
// breaker is open, the local store if it is or the store fails. A local
// decision is a real one, so it comes with no error (unlike FailOpen's and
// FailClosed's, which are made up); the Observer sees the store's error.
func (l *Limiter) applyFallback(ctx context.Context, r Request) (Decision, error) {
	start := time.Now()
	var storeErr error
	if !l.fb.UseLocal() {
		sctx, cancel := l.withTimeout(ctx)
		d, err := l.store.Apply(sctx, r)
		cancel()
		if !l.fb.Report(err) {
			if err != nil {
				d = l.failed(err)
			}
			l.observe(r, d, err, time.Since(start))
			return d, err
		}
		storeErr = err
	}
	d, err := l.fb.Apply(ctx, r)
	if err != nil {
		err = errors.Join(storeErr, err)
		d = l.failed(err)
	}
	if err == nil {
		// The Observer learns why the decision is local.
		l.observe(r, d, storeErr, time.Since(start))
	} else {
		l.observe(r, d, err, time.Since(start))
	}
	return d, err
}

// applyEachFallback is AllowEach under FailLocal.
func (l *Limiter) applyEachFallback(ctx context.Context, rs []Request) (Decision, []Decision, error) {
	start := time.Now()
	var storeErr error
	if !l.fb.UseLocal() {
		sctx, cancel := l.withTimeout(ctx)
		ds, err := applyBatch(sctx, l.store, rs)
		cancel()
		if !l.fb.Report(err) {
			return l.finishEach(rs, ds, err, nil, start)
		}
		storeErr = err
	}
	ds, err := l.fb.ApplyBatch(ctx, rs)
	if err != nil {
		err = errors.Join(storeErr, err)
	}
	return l.finishEach(rs, ds, err, storeErr, start)
}

// applyBatch applies rs in s all or nothing when it is a Batcher, else one
// by one, and checks the count of decisions.
func applyBatch(ctx context.Context, s Store, rs []Request) ([]Decision, error) {
	var ds []Decision
	var err error
	if b, ok := s.(Batcher); ok {
		ds, err = b.ApplyBatch(ctx, rs)
	} else {
		ds = make([]Decision, 0, len(rs))
		for _, r := range rs {
			var d Decision
			if d, err = s.Apply(ctx, r); err != nil {
				break
			}
			ds = append(ds, d)
		}
	}
	if err == nil && len(ds) != len(rs) {
		err = fmt.Errorf("%w: %d decisions for %d requests", ErrUnexpectedReply, len(ds), len(rs))
	}
	return ds, err
}
