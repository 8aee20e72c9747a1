// Package limitcheck holds what middleware/httplimit and
// middleware/grpclimit share: the checks of New on the list of limits, and
// the decision for one request or call given its key.
package limitcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/ratelimitheader"
)

// MissingKey says what to do with a request or call without a key. Its
// values are those of httplimit.MissingKey and grpclimit.MissingKey.
type MissingKey int

const (
	// Deny refuses it, with the package's ErrMissingKey.
	Deny MissingKey = iota
	// Allow lets it through uncounted, with the package's ErrMissingKey.
	Allow
	// Shared counts it under the anonymous key.
	Shared
)

// Validate returns the errors of a middleware's Config: a nil Limiter, no
// limits, a limit that is not valid, a concurrency limit, a bad policy
// name, a policy name used twice, an unknown MissingKey. Each error starts
// with pkg + ": New: "; unit ("request", "call") names what a concurrency
// limit's lease would have to outlive.
func Validate(pkg, unit string, limiter *floodgate.Limiter, limits []floodgate.Limit, missing MissingKey) error {
	prefix := pkg + ": New: "
	var errs []error
	if limiter == nil {
		errs = append(errs, errors.New(prefix+"nil Limiter"))
	}
	if len(limits) == 0 {
		errs = append(errs, errors.New(prefix+"no Limits"))
	}
	names := map[string]bool{}
	for i, l := range limits {
		if err := l.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%slimits[%d]: %w", prefix, i, err))
		}
		if l.Algorithm == floodgate.Concurrency {
			errs = append(errs, fmt.Errorf("%slimits[%d]: %w", prefix, i, &floodgate.FieldError{Kind: floodgate.ErrInvalidLimit, Field: "algorithm",
				Problem: "a concurrency limit needs a lease held for the whole " + unit + "; use Limiter.Acquire"}))
		}
		if err := ratelimitheader.CheckName(l.Name); err != nil {
			errs = append(errs, fmt.Errorf("%slimits[%d]: %w", prefix, i, err))
		}
		name := ratelimitheader.PolicyName(limits, i)
		if names[name] {
			errs = append(errs, fmt.Errorf("%slimits[%d]: policy name %q is used twice; set Limit.Name", prefix, i, name))
		}
		names[name] = true
	}
	switch missing {
	case Deny, Allow, Shared:
	default:
		errs = append(errs, fmt.Errorf("%sunknown MissingKey %d", prefix, int(missing)))
	}
	return errors.Join(errs...)
}

// Checker decides requests or calls: the part of a middleware's Config
// that Check needs. Init it before use.
type Checker struct {
	Limiter      *floodgate.Limiter
	Limits       []floodgate.Limit
	KeyPrefix    string
	MissingKey   MissingKey
	AnonymousKey string
	// ErrMissingKey is the package's error for a request without a key.
	ErrMissingKey error
	// MaxWait, above zero, waits for a slot of the one limit (gcra or
	// token_bucket) instead
	// of refusing (see Check).
	MaxWait time.Duration
	// Classes reports that the caller gives requests a priority class:
	// Init checks that every limit can keep the reserves.
	Classes bool
	// After is the timer of a wait, time.NewTimer's channel and its stop;
	// nil means time.NewTimer. Tests replace it.
	After func(time.Duration) (<-chan time.Time, func() bool)
}

// Outcome is the decision for one request or call: the fields of the
// packages' Result but Limits and DryRun.
type Outcome struct {
	Key       string
	Decision  floodgate.Decision
	Decisions []floodgate.Decision
	Err       error
	// Limits are the limits decided when they are not the Checker's:
	// those of the request's class.
	Limits []floodgate.Limit
	// Waited is how long the request waited for its slot.
	Waited time.Duration
}

// Init checks c as New does (see Validate), then copies c.Limits, so that
// the caller's slice may change, and defaults AnonymousKey to "anonymous".
func (c *Checker) Init(pkg, unit string) error {
	if err := Validate(pkg, unit, c.Limiter, c.Limits, c.MissingKey); err != nil {
		return err
	}
	prefix := pkg + ": New: "
	var errs []error
	switch {
	case c.MaxWait < 0 || c.MaxWait > floodgate.MaxWait:
		errs = append(errs, fmt.Errorf("%sMaxWait %v is not between 0 and %v", prefix, c.MaxWait, floodgate.MaxWait))
	case c.MaxWait > 0 && c.Classes:
		errs = append(errs, fmt.Errorf("%sMaxWait and Priority: a wait holds the whole limit and takes no class", prefix))
	case c.MaxWait > 0 && (len(c.Limits) != 1 || !canWait(c.Limits[0])):
		errs = append(errs, fmt.Errorf("%sMaxWait waits for a slot of one gcra or token_bucket limit, not of %d limits or another algorithm: the slots of two limits come at different times (docs/waiting.md)", prefix, len(c.Limits)))
	}
	if c.Classes {
		for i, l := range c.Limits {
			if _, err := floodgate.ClassLimit(l, floodgate.Sheddable); err != nil {
				errs = append(errs, fmt.Errorf("%slimits[%d]: Priority: %w", prefix, i, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.Limits = append([]floodgate.Limit(nil), c.Limits...)
	if c.AnonymousKey == "" {
		c.AnonymousKey = "anonymous"
	}
	return nil
}

// Check decides the request or call with the given key ("" for none),
// taking one unit of every limit, all or nothing, under class's share of
// them when class is not empty. With MaxWait, it takes the earliest slot
// within MaxWait (floodgate.Limiter.Schedule) and waits for it; if ctx
// ends first the slot is given back, exactly once, and Err is ctx's
// error. A slot that came is settled as used, so the store keeps no hold
// for it.
func (c *Checker) Check(ctx context.Context, key string, class floodgate.Priority) Outcome {
	var o Outcome
	if key == "" {
		switch c.MissingKey {
		case Allow:
			o.Decision, o.Err = floodgate.Decision{Allowed: true}, c.ErrMissingKey
			return o
		case Shared:
			key = c.AnonymousKey
		default:
			o.Err = c.ErrMissingKey
			return o
		}
	}
	o.Key = c.KeyPrefix + key
	switch {
	case c.MaxWait > 0:
		c.wait(ctx, &o)
	case class != "":
		c.decideClass(ctx, &o, class)
	default:
		o.Decision, o.Decisions, o.Err = c.Limiter.AllowEach(ctx, o.Key, 1, c.Limits...)
	}
	return o
}

// wait takes o.Key's slot of the one limit and waits for it.
func (c *Checker) wait(ctx context.Context, o *Outcome) {
	slot, d, err := c.Limiter.Schedule(ctx, o.Key, c.Limits[0], 1, c.MaxWait, nil)
	o.Decision, o.Err = d, err
	if err != nil {
		// The failure policy's decision, as AllowEach answers it.
		return
	}
	o.Decisions = []floodgate.Decision{d}
	if !d.Allowed || !slot.Held {
		return
	}
	if slot.Delay > 0 {
		after := c.After
		if after == nil {
			after = func(d time.Duration) (<-chan time.Time, func() bool) {
				t := time.NewTimer(d)
				return t.C, t.Stop
			}
		}
		t, stop := after(slot.Delay)
		defer stop()
		select {
		case <-t:
		case <-ctx.Done():
			// On a context of its own (ctx's is done), bounded by the
			// Limiter's timeout. A failed cancel leaves the slot to
			// expire charged, as a caller that crashed does.
			_, _ = slot.Cancel(context.WithoutCancel(ctx))
			o.Decision, o.Decisions, o.Err = floodgate.Decision{RetryAfter: slot.Delay}, nil, ctx.Err()
			return
		}
		o.Waited = slot.Delay
	}
	// Used: a failed commit leaves the slot to expire charged, the same.
	_, _ = slot.Commit(context.WithoutCancel(ctx), 1)
}

// decideClass decides o.Key under every limit lowered to class's
// capacity, all or nothing (floodgate.Limiter.DecideAll).
func (c *Checker) decideClass(ctx context.Context, o *Outcome, class floodgate.Priority) {
	if _, err := floodgate.ParsePriority(string(class)); err != nil {
		o.Decision, o.Err = floodgate.Decision{RetryAfter: floodgate.Never}, err
		return
	}
	items := make([]floodgate.Item, len(c.Limits))
	o.Limits = make([]floodgate.Limit, len(c.Limits))
	for i, l := range c.Limits {
		items[i] = floodgate.Item{Key: o.Key, Limit: l, Cost: 1, Priority: class}
		o.Limits[i], _ = floodgate.ClassLimit(l, class) // checked by Init
	}
	outs, err := c.Limiter.DecideAll(ctx, items)
	if err != nil {
		o.Decision, o.Err = floodgate.Decision{RetryAfter: floodgate.Never}, err
		return
	}
	ds := make([]floodgate.Decision, len(outs))
	for i, out := range outs {
		if out.Err != nil && out.Policy != floodgate.FailLocal {
			// The failure policy's answer, as AllowEach gives it.
			o.Decision, o.Err = out.Decision, out.Err
			return
		}
		ds[i] = out.Decision
	}
	o.Decision, o.Decisions = floodgate.Combine(ds), ds
}

// Violated names the policies (by ratelimitheader.PolicyName) whose own
// decision is a denial with a wait, not those that merely gave back their
// unit because another limit denied.
func Violated(limits []floodgate.Limit, decisions []floodgate.Decision) []string {
	var names []string
	for _, i := range ViolatedIndexes(limits, decisions) {
		names = append(names, ratelimitheader.PolicyName(limits, i))
	}
	return names
}

// ViolatedIndexes are the indexes in limits of the policies Violated names.
func ViolatedIndexes(limits []floodgate.Limit, decisions []floodgate.Decision) []int {
	var idx []int
	for i, d := range decisions {
		if !d.Allowed && d.RetryAfter != 0 && i < len(limits) {
			idx = append(idx, i)
		}
	}
	return idx
}

// canWait reports whether a slot of l can be taken in the future
// (floodgate.Limiter.Schedule): gcra and token_bucket.
func canWait(l floodgate.Limit) bool {
	a := l.EffectiveAlgorithm()
	return a == floodgate.GCRA || a == floodgate.TokenBucket
}
