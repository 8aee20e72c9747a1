package floodgate

import (
	"context"
	"math/bits"
)

// Priority is the class of a request near its limit: lower classes are
// refused first, so that the last part of a budget is kept for higher
// ones. The zero value is Normal.
type Priority string

// The priority classes, highest first, and the part of a limit's capacity
// each may not take (DefaultReserve).
const (
	// Critical may take the whole budget.
	Critical Priority = "critical"
	// Normal may not take the last 5%.
	Normal Priority = "normal"
	// Sheddable may not take the last 20%.
	Sheddable Priority = "sheddable"
)

// Reserve is the percent of a limit's capacity (Limit.Capacity) a class
// may not take: 0 for Critical, 5 for Normal, 20 for Sheddable. The units
// kept are rounded up: 20% of 10 per second is 2 units.
func (p Priority) Reserve() int64 {
	switch p {
	case Critical:
		return 0
	case Sheddable:
		return 20
	}
	return 5
}

// AllowPriority takes n units of key under limit for a request of class
// p, as AllowN does, but admits it only if the units left after it are at
// least p's reserve (Reserve percent of the capacity, rounded up): under
// overload Sheddable requests stop with 20% left, Normal ones with 5%, and
// Critical ones take the budget to its end. The check is in the store's
// one atomic step: the store decides the request under the limit with its
// capacity lowered by the reserve (a GCRA's Burst, a fixed window's
// Limit), which admits exactly the requests that leave the reserve, and
// counts the units on the key's one state, which every class shares.
// Only GCRA and FixedWindow limits without CountRejected take a class
// other than Critical (the others read a state kept under a larger
// capacity as at most full, and would forget units): another is an error
// wrapping ErrInvalidLimit. The Decision's Limit and Remaining are the
// class's: the capacity less the reserve, and what the class may still
// take.
func (l *Limiter) AllowPriority(ctx context.Context, key string, limit Limit, n int64, p Priority) (Decision, error) {
	cl, err := classLimit(limit, p)
	if err != nil {
		return Decision{RetryAfter: Never}, err
	}
	return l.AllowN(ctx, key, cl, n)
}

// ParsePriority is the class named s: "critical", "normal" or
// "sheddable". Another name is an error wrapping ErrInvalidRequest whose
// FieldError names "priority".
func ParsePriority(s string) (Priority, error) {
	switch p := Priority(s); p {
	case Critical, Normal, Sheddable:
		return p, nil
	}
	return "", fieldErr(ErrInvalidRequest, "priority", "%q is not critical, normal or sheddable", s)
}

// ClassLimit is the limit a request of class p is decided under, as
// AllowPriority decides it: limit with its capacity lowered by p's
// reserve (p empty is Normal). The error is AllowPriority's for a class
// the limit's algorithm cannot keep a reserve for, or an invalid limit.
func ClassLimit(limit Limit, p Priority) (Limit, error) {
	return classLimit(limit, p)
}

// itemLimit lowers r's limit to the class of it, when it has one. A
// class the limit cannot honour is an error naming "priority".
func itemLimit(r *Request, it Item) error {
	if it.Priority == "" {
		return nil
	}
	if it.Flow != "" {
		return fieldErr(ErrInvalidLimit, "priority", "a limit shared by flows (share_by) keeps no reserve for classes")
	}
	cl, err := classLimit(it.Limit, it.Priority)
	if fe, ok := err.(*FieldError); ok && fe.Field == "algorithm" {
		return fieldErr(ErrInvalidLimit, "priority", "%s", fe.Problem)
	}
	if err != nil {
		return err
	}
	r.Limit = cl
	return nil
}

// classLimit is limit with its capacity lowered by p's reserve.
func classLimit(limit Limit, p Priority) (Limit, error) {
	switch p {
	case "", Critical, Normal, Sheddable:
	default:
		return limit, fieldErr(ErrInvalidRequest, "priority", "%q is not critical, normal or sheddable", string(p))
	}
	if err := limit.Validate(); err != nil {
		return limit, err
	}
	pct := p.Reserve()
	if pct == 0 || limit.Limit == 0 {
		return limit, nil
	}
	capacity := limit.Capacity()
	// keep = ceil(capacity*pct/100), in 128 bits.
	hi, lo := bits.Mul64(uint64(capacity), uint64(pct))
	lo, c := bits.Add64(lo, 99, 0)
	keep, _ := bits.Div64(hi+c, lo, 100)
	cl := limit
	switch alg := limit.EffectiveAlgorithm(); {
	case alg == GCRA:
		cl.Burst = capacity - int64(keep)
		if cl.Burst == 0 {
			// Burst 0 means "the Limit": nothing is left for the class.
			cl.Limit, cl.Burst = 0, 0
		}
	case alg == FixedWindow && !limit.CountRejected:
		cl.Limit = capacity - int64(keep)
		if cl.Limit == 0 {
			cl.LocalBudget = 0
		}
	default:
		return limit, fieldErr(ErrInvalidLimit, "algorithm", "only gcra and fixed_window without count_rejected keep a reserve for higher classes, not %s", alg)
	}
	if cl.LocalBudget > cl.Limit {
		cl.LocalBudget = cl.Limit
	}
	return cl, nil
}
