package floodgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultProbeInterval is the default Options.ProbeInterval: how long
// FailLocal decides locally after a failure of the shared store before it
// lets one call try the store again.
const DefaultProbeInterval = time.Second

// fallback is the circuit breaker and local store behind FailLocal. A
// Limiter made with Options.Local and Options.Instances has one, shared by
// every call whose policy is FailLocal. It is safe for concurrent use.
//
// The breaker is closed while the shared store answers: every call goes to
// it. A store failure (see ErrStore; a timeout included, a cancelled call
// or an invalid request not) opens it for ProbeInterval, during
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
type fallback struct {
	local     Store
	instances int
	probe     time.Duration
	clock     Clock

	// openUntil is the end of the open state, in ns since the epoch by
	// clock; 0 while closed.
	openUntil atomic.Int64
	// probing is set while one call tries the store after the interval.
	probing atomic.Bool
}

// newFallback is the fallback of a Limiter's options: nil without Local
// and Instances. It reports every problem of those fields at once.
func newFallback(o *Options) (*fallback, error) {
	if o.Local == nil && o.Instances == 0 && o.ProbeInterval == 0 && o.FailurePolicy != FailLocal {
		return nil, nil
	}
	var errs []error
	if o.Local == nil {
		errs = append(errs, errors.New("floodgate: New: Local: nil; failure policy local needs a local store (memstore.New)"))
	}
	if o.Instances < 1 {
		errs = append(errs, fmt.Errorf("floodgate: New: Instances: %d, but failure policy local needs the number of instances sharing the store (at least 1)", o.Instances))
	}
	if o.ProbeInterval < 0 {
		errs = append(errs, fmt.Errorf("floodgate: New: ProbeInterval: negative %v", o.ProbeInterval))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	f := &fallback{local: o.Local, instances: o.Instances, probe: o.ProbeInterval, clock: o.Clock}
	if f.probe == 0 {
		f.probe = DefaultProbeInterval
	}
	if f.clock == nil {
		f.clock = SystemClock{}
	}
	return f, nil
}

// Share is limit as each of instances instances holds it on its own:
// Limit, and Burst for TokenBucket and GCRA, divided by instances and
// rounded down, so the fleet never admits more than the whole; but at
// least 1, so an instance of a fleet larger than the limit still admits
// something (the fleet then admits up to instances per window, not
// limit). A limit of 0 stays 0. Concurrency limits are divided the same
// way: each instance holds its share of leases. Share(limit, 1) is limit.
// It is what FailLocal decides with while the store is failing
// (Outcome.Limit reports it).
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

// useLocal reports whether a call should be decided locally without asking
// the shared store: true while the breaker is open, except for the one
// call per interval that it lets probe the store. A caller that gets false
// must report the store's answer.
func (f *fallback) useLocal() bool {
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
	// breaker again (report stores openUntil before it clears probing):
	// this call is not a second probe of the same interval.
	if f.clock.Now().UnixNano() < f.openUntil.Load() {
		f.probing.Store(false)
		return true
	}
	return false
}

// report tells the breaker how the shared store answered: nil closes it; a
// store failure (see ErrStore) opens it for the probe interval. Any other
// error (an invalid request, a conflict, a cancelled call) says nothing
// about the store and leaves it as it was. report returns whether
// err is a store failure, which the caller should decide locally.
func (f *fallback) report(err error) bool {
	switch {
	case err == nil:
		f.openUntil.Store(0)
		f.probing.Store(false)
		return false
	case !isStoreFailure(err):
		f.probing.Store(false)
		return false
	}
	f.openUntil.Store(max(1, f.clock.Now().Add(f.probe).UnixNano()))
	f.probing.Store(false)
	return true
}

// share is r's limit as this instance holds it.
func (f *fallback) share(r Request) (Request, error) {
	r.Limit = Share(r.Limit, f.instances)
	if !r.Limit.valid() {
		return r, fmt.Errorf("floodgate: local fallback: the share of %s over %d instances: %w", r.Limit, f.instances, r.Limit.Validate())
	}
	return r, nil
}

// apply decides rs in the local store with this instance's share of each
// limit, all or nothing when atomic and the local store is a Batcher
// (memstore is), else each on its own, and marks the decisions Fallback.
// ctx should be the caller's, not one whose store deadline has passed.
func (f *fallback) apply(ctx context.Context, rs []Request, atomic bool, hold *holdStep) ([]Decision, []error) {
	local := make([]Request, len(rs))
	ds, errs := make([]Decision, len(rs)), make([]error, len(rs))
	var bad error
	for i, r := range rs {
		if local[i], errs[i] = f.share(r); errs[i] != nil {
			bad = errs[i]
		}
	}
	switch {
	case atomic && bad != nil:
		fill(errs, bad)
	case atomic:
		var err error
		if ds, err = applyBatch(ctx, f.local, local, hold); err != nil {
			ds = make([]Decision, len(rs))
			fill(errs, fmt.Errorf("floodgate: local fallback: %w", err))
		}
	default:
		for i, r := range local {
			if errs[i] != nil {
				continue
			}
			if ds[i], errs[i] = f.local.Apply(ctx, r); errs[i] != nil {
				errs[i] = fmt.Errorf("floodgate: local fallback: %w", errs[i])
			}
		}
	}
	for i := range ds {
		ds[i].Fallback = errs[i] == nil
	}
	return ds, errs
}

// fill sets every element of errs to err.
func fill(errs []error, err error) {
	for i := range errs {
		errs[i] = err
	}
}
