package floodgate

import (
	"context"
	"math/bits"
	"strconv"
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

// Reserve is the default percent of a limit's capacity (Limit.Capacity)
// a class may not take: 0 for Critical, 5 for Normal, 20 for Sheddable.
// The units kept are rounded up: 20% of 10 per second is 2 units.
// Reserves configure others.
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
	cl, err := classLimit(limit, p, defaultReserves)
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
	return classLimit(limit, p, defaultReserves)
}

// ClassReserve is the part of a limit's capacity (Limit.Capacity) a class may
// not take: Percent of the capacity, rounded up to whole units, or Units.
// At most one of the two is set; the zero ClassReserve keeps nothing.
type ClassReserve struct {
	// Percent is 0 to 100.
	Percent int64
	// Units is 0 or more; a reserve of the whole capacity or more keeps
	// it all, and the class is admitted nothing.
	Units int64
}

// Kept is the units r keeps of capacity: Units, or Percent of capacity
// rounded up (20% of 10 is 2), never more than capacity.
func (r ClassReserve) Kept(capacity int64) int64 {
	keep := r.Units
	if r.Percent > 0 {
		// ceil(capacity*pct/100), in 128 bits.
		hi, lo := bits.Mul64(uint64(capacity), uint64(r.Percent))
		lo, c := bits.Add64(lo, 99, 0)
		k, _ := bits.Div64(hi+c, lo, 100)
		keep = int64(k)
	}
	return min(keep, capacity)
}

// String is the reserve as the config writes it: "20%", "5" (units).
func (r ClassReserve) String() string {
	if r.Percent > 0 {
		return strconv.FormatInt(r.Percent, 10) + "%"
	}
	return strconv.FormatInt(r.Units, 10)
}

// Reserves are the reserves of the classes below Critical, which takes
// the whole budget by definition (a reserve kept from every class is a
// lower limit). Decided under Reserves, a Normal request is admitted only
// if the units left after it are at least Normal's reserve, a Sheddable
// one only if they are at least Sheddable's; Sheddable's must keep at
// least as much as Normal's, so that a lower class is never refused
// after a higher one. Without Reserves (AllowPriority, ClassLimit, an
// Item without them) the reserves are Normal 5% and Sheddable 20%.
type Reserves struct {
	Normal    ClassReserve
	Sheddable ClassReserve
}

// defaultReserves are the reserves of Priority.Reserve.
var defaultReserves = Reserves{Normal: ClassReserve{Percent: 5}, Sheddable: ClassReserve{Percent: 20}}

// Validate checks rs on its own: no negative, no percent above 100, at
// most one of Percent and Units per class. An error wraps
// ErrInvalidLimit and its FieldError names the class ("reserves.normal",
// "reserves.sheddable"). Limit checks the rest against a limit's
// capacity.
func (rs Reserves) Validate() error {
	if err := rs.Normal.check("reserves.normal"); err != nil {
		return err
	}
	return rs.Sheddable.check("reserves.sheddable")
}

// check is Validate for one class's reserve, named field. (No slice of
// the two: a decision validates its item's reserves, and a literal
// whose values reach an error escapes to the heap.)
func (r ClassReserve) check(field string) error {
	switch {
	case r.Percent < 0 || r.Units < 0:
		return fieldErr(ErrInvalidLimit, field, "a reserve cannot be negative")
	case r.Percent > 100:
		return fieldErr(ErrInvalidLimit, field, "%d%% is more than the whole capacity", r.Percent)
	case r.Percent > 0 && r.Units > 0:
		return fieldErr(ErrInvalidLimit, field, "give a percent or units, not both")
	}
	return nil
}

// Limit is the limit a request of class p is decided under with the
// reserves rs: limit with its capacity lowered by p's reserve (p empty
// is no class: limit itself; Critical is limit itself). It is an error
// wrapping ErrInvalidLimit if rs is not valid, if for this limit's
// capacity Sheddable's reserve keeps fewer units than Normal's, or if
// the limit's algorithm cannot keep a reserve (only GCRA and FixedWindow
// without CountRejected can, for a class but Critical; the FieldError
// names "algorithm"); an unknown class wraps ErrInvalidRequest.
func (rs Reserves) Limit(limit Limit, p Priority) (Limit, error) {
	if err := rs.Validate(); err != nil {
		return limit, err
	}
	return classLimit(limit, p, rs)
}

// itemLimit lowers r's limit to the class of it, when it has one, under
// its Reserves (the default ones when nil). A class the limit cannot
// honour is an error naming "priority"; bad reserves, "reserves".
func itemLimit(r *Request, it Item) error {
	if it.Priority == "" {
		return nil
	}
	if it.Flow != "" {
		return fieldErr(ErrInvalidLimit, "priority", "a limit shared by flows (share_by) keeps no reserve for classes")
	}
	rs := defaultReserves
	if it.Reserves != nil {
		rs = *it.Reserves
		if err := rs.Validate(); err != nil {
			return err
		}
	}
	cl, err := classLimit(it.Limit, it.Priority, rs)
	if fe, ok := err.(*FieldError); ok && fe.Field == "algorithm" {
		return fieldErr(ErrInvalidLimit, "priority", "%s", fe.Problem)
	}
	if err != nil {
		return err
	}
	r.Limit = cl
	return nil
}

// classLimit is limit with its capacity lowered by p's reserve in rs.
func classLimit(limit Limit, p Priority, rs Reserves) (Limit, error) {
	var r ClassReserve
	switch p {
	case "", Critical:
	case Normal:
		r = rs.Normal
	case Sheddable:
		r = rs.Sheddable
	default:
		return limit, fieldErr(ErrInvalidRequest, "priority", "%q is not critical, normal or sheddable", string(p))
	}
	if err := limit.Validate(); err != nil {
		return limit, err
	}
	if limit.Limit == 0 {
		return limit, nil
	}
	capacity := limit.Capacity()
	if n, s := rs.Normal.Kept(capacity), rs.Sheddable.Kept(capacity); s < n {
		return limit, fieldErr(ErrInvalidLimit, "reserves.sheddable", "sheddable keeps %d units of %d, fewer than normal's %d: a lower class would be admitted after a higher one is refused", s, capacity, n)
	}
	keep := r.Kept(capacity)
	if keep == 0 {
		return limit, nil
	}
	cl := limit
	switch alg := limit.EffectiveAlgorithm(); {
	case alg == GCRA:
		cl.Burst = capacity - keep
		if cl.Burst == 0 {
			// Burst 0 means "the Limit": nothing is left for the class.
			cl.Limit, cl.Burst = 0, 0
		}
	case alg == FixedWindow && !limit.CountRejected:
		cl.Limit = capacity - keep
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
