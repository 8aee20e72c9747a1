package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// UsedFunc reads a store's counter for Reconcile: the units the counter of
// u.Key holds in u.Window under u.Limit, 0 when the counter is missing
// (the store lost it) or counts another window. PeekUsed makes one from a
// floodgate.Limiter.
type UsedFunc func(ctx context.Context, u Usage) (int64, error)

// RepairFunc raises a counter that is behind the ledger (d.Counter <
// d.Units) by the units it lost, d.Missing(). Raise makes one from a
// floodgate.Limiter.
type RepairFunc func(ctx context.Context, d Drift) error

// Drift is a window where a store's counter and the ledger disagree.
type Drift struct {
	// Usage is what the ledger holds for the window; its Limit is the
	// quota the counter runs under (ReconcileOptions.Limit).
	Usage
	// Counter is the units the store's counter holds in the window.
	Counter int64
	// Repaired reports that Repair raised the counter to the ledger's
	// units.
	Repaired bool
	// RepairErr is Repair's error, if it failed.
	RepairErr error
}

// Expected is what the counter should hold: the ledger's units, or the
// limit when the ledger holds more (commits charged beyond the limit): a
// counter cannot count above its limit, and at the limit it denies as it
// would above.
func (d Drift) Expected() int64 { return expected(d.Usage) }

func expected(u Usage) int64 { return min(u.Units, u.Limit.Limit) }

// Missing is the units the counter lost: Expected - Counter when the
// counter is behind the ledger, else 0.
func (d Drift) Missing() int64 { return max(0, d.Expected()-d.Counter) }

// Behind reports a counter below the ledger: it lost units (a Redis
// restart without persistence, a failover, an eviction) and would admit
// them again.
func (d Drift) Behind() bool { return d.Counter < d.Expected() }

// ReconcileOptions configure Reconcile. A nil *ReconcileOptions, or the
// zero value, means now, every key, and no repair.
type ReconcileOptions struct {
	// Now is the time of the counters: the windows that contain it are
	// compared (older windows have no counter left to compare). Zero
	// means time.Now().
	Now time.Time
	// KeyPrefix keeps the keys that start with it.
	KeyPrefix string
	// Limit, if set, returns the quota the counter of key runs under now
	// (a limit raised since the commits), given the one recorded with the
	// window's latest entry; nil means the recorded one. Its algorithm,
	// period and alignment must be the recorded ones (the counter of
	// another is another counter); only the limit may differ.
	Limit func(key string, recorded floodgate.Limit) floodgate.Limit
	// Repair, if set, is called for each drift whose counter is behind
	// the ledger, to raise the counter to the ledger's units. A counter
	// ahead of the ledger is reported and never lowered: its extra units
	// may be reservations still held, commits whose ledger write failed,
	// or admissions outside durable commits, and lowering it could admit
	// what was paid for by nobody.
	Repair RepairFunc
}

// Reconcile compares the counters of a store with the ledger s, for every
// window of the ledger that contains o.Now, and returns the drifts in
// report order (key, then window): the windows whose counter does not
// hold the ledger's units (Drift.Expected). used reads a counter
// (PeekUsed).
//
// Repair means: the counter is raised to the ledger's units, never lowered
// below them. After a repair the store admits in the window at most what
// the ledger has not recorded; a repair that finds the counter moved on
// (traffic since the read) still only adds the missing units, which is
// what the traffic did not already count. A failed repair is in the
// Drift's RepairErr and Reconcile goes on; a failed read or ledger query
// stops it with an error, returning the drifts found so far.
func Reconcile(ctx context.Context, s Store, used UsedFunc, o *ReconcileOptions) ([]Drift, error) {
	var opts ReconcileOptions
	if o != nil {
		opts = *o
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	var drifts []Drift
	for u, err := range All(ctx, s, Query{KeyPrefix: opts.KeyPrefix, Active: opts.Now}) {
		if err != nil {
			return drifts, fmt.Errorf("ledger: Reconcile: %w", err)
		}
		if opts.Limit != nil {
			l := opts.Limit(u.Key, u.Limit)
			if l.EffectiveAlgorithm() != u.Limit.EffectiveAlgorithm() || l.Period != u.Limit.Period || aligned(l) != aligned(u.Limit) || l.Calendar != u.Limit.Calendar {
				return drifts, fmt.Errorf("ledger: Reconcile: key %q: the limit %v is not the recorded quota's algorithm, period and window (%v)", u.Key, l, u.Limit)
			}
			u.Limit = l
		}
		n, err := used(ctx, u)
		if err != nil {
			return drifts, fmt.Errorf("ledger: Reconcile: key %q: %w", u.Key, err)
		}
		if n == expected(u) {
			continue
		}
		d := Drift{Usage: u, Counter: n}
		if d.Behind() && opts.Repair != nil {
			d.RepairErr = opts.Repair(ctx, d)
			d.Repaired = d.RepairErr == nil
		}
		drifts = append(drifts, d)
	}
	return drifts, nil
}

// PeekUsed reads counters through l.Peek, which takes nothing: used is
// Limit - Remaining of the Decision when the counter counts the ledger's
// window (WindowOf), else 0. The keys of a ledger are store keys, so l
// must have no KeyPrefix. A count above the limit reads as the limit.
func PeekUsed(l *floodgate.Limiter) UsedFunc {
	return func(ctx context.Context, u Usage) (int64, error) {
		d, err := l.Peek(ctx, u.Key, u.Limit)
		if err != nil {
			return 0, err
		}
		if w, ok := WindowOf(u.Limit, d); !ok || !w.Start.Equal(u.Window.Start) {
			return 0, nil
		}
		return d.Limit - d.Remaining, nil
	}
}

// Raise repairs counters in l's store. When the store is a
// floodgate.Raiser (both of Floodgate's are), the counter of the ledger's
// window is raised to d.Expected() in one atomic step, never lowered, in
// that very window (a FirstHit one included), whatever traffic does
// meanwhile. Otherwise it takes d.Missing() units through l.AllowN, or,
// when the limit does not admit that many, what it still admits, so the
// counter ends at the ledger's units or the limit, whichever is lower; a
// FirstHit counter that the store lost then starts a new window at the
// repair, later than the ledger's, which errs on the side of denying, and
// traffic between the read and the repair can make it count a little
// more. l must have no KeyPrefix.
func Raise(l *floodgate.Limiter) RepairFunc {
	return func(ctx context.Context, d Drift) error {
		n := d.Missing()
		if n == 0 {
			return nil
		}
		if rs, ok := l.Store().(floodgate.Raiser); ok {
			_, err := rs.Raise(ctx, floodgate.Request{Key: d.Key, Limit: d.Limit, Cost: d.Expected()}, d.Window.Start)
			return err
		}
		dec, err := l.AllowN(ctx, d.Key, d.Limit, n)
		if err != nil || dec.Allowed || dec.Remaining == 0 {
			return err
		}
		_, err = l.AllowN(ctx, d.Key, d.Limit, min(n, dec.Remaining))
		return err
	}
}
