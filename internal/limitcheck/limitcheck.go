// Package limitcheck holds what middleware/httplimit and
// middleware/grpclimit share: the checks of New on the list of limits, and
// the decision for one request or call given its key.
package limitcheck

import (
	"context"
	"errors"
	"fmt"

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
}

// Outcome is the decision for one request or call: the fields of the
// packages' Result but Limits and DryRun.
type Outcome struct {
	Key       string
	Decision  floodgate.Decision
	Decisions []floodgate.Decision
	Err       error
}

// Init checks c as New does (see Validate), then copies c.Limits, so that
// the caller's slice may change, and defaults AnonymousKey to "anonymous".
func (c *Checker) Init(pkg, unit string) error {
	if err := Validate(pkg, unit, c.Limiter, c.Limits, c.MissingKey); err != nil {
		return err
	}
	c.Limits = append([]floodgate.Limit(nil), c.Limits...)
	if c.AnonymousKey == "" {
		c.AnonymousKey = "anonymous"
	}
	return nil
}

// Check decides the request or call with the given key ("" for none),
// taking one unit of every limit, all or nothing.
func (c *Checker) Check(ctx context.Context, key string) Outcome {
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
	o.Decision, o.Decisions, o.Err = c.Limiter.AllowEach(ctx, o.Key, 1, c.Limits...)
	return o
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
