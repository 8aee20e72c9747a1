package server

import (
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// LimitStatus is the outcome of one limit of a descriptor decided by
// several (Status.Limits).
type LimitStatus struct {
	// Code is OverLimit when this limit denied the request (or its store
	// failed under fail_closed); a limit that had room while another
	// denied is OK, with Decision.Allowed false and RetryAfter 0: the
	// request took nothing from it.
	Code Code
	// Limit is the limit; for a decision of the failure mode local, this
	// instance's share.
	Limit floodgate.Limit
	// Decision is the store's decision for this limit.
	Decision floodgate.Decision
	// Shadow reports a denial that shadow mode turned into OK.
	Shadow bool
	// Err and FailurePolicy are as Status's.
	Err           error
	FailurePolicy floodgate.FailurePolicy
}

// Restrictive reports whether a is more restrictive than b, the order in
// which a descriptor of several limits reports the one that binds it (and
// Envoy's DescriptorStatus and the RateLimit header fields carry): a denial
// before an admission; between denials, the longer wait (RetryAfter, never
// the longest); between admissions, the fewer units remaining, then the
// later reset. A limit whose store failed comes before one that answered,
// the codes being equal.
func Restrictive(a, b LimitStatus) bool {
	switch {
	case a.Code != b.Code:
		return a.Code == OverLimit
	case (a.Err != nil) != (b.Err != nil):
		return a.Err != nil
	case a.Code == OverLimit:
		ra, rb := a.Decision.RetryAfter, b.Decision.RetryAfter
		return ra != rb && (ra == floodgate.Never || rb != floodgate.Never && ra > rb)
	case a.Decision.Remaining != b.Decision.Remaining:
		return a.Decision.Remaining < b.Decision.Remaining
	}
	return a.Decision.ResetAfter > b.Decision.ResetAfter
}

// addSeveral adds an item for each of limits, all of descriptor i, which
// the store decides together (adjacent in p.items, so that decidePlan and
// settleEach find them). Each item is it under one limit, answered by the
// rule's failure policy, or fail_closed for a durable limit when the rule
// gives none.
func (p *plan) addSeveral(it floodgate.Item, i int, ownHits, shadow, quota bool, limits []floodgate.Limit, policy floodgate.FailurePolicy) {
	for _, lim := range limits {
		one := it
		one.Limit, one.Policy = lim, policy
		if policy == "" && lim.Durable {
			one.Policy = floodgate.FailClosed
		}
		p.items = append(p.items, one)
		p.which = append(p.which, i)
		p.ownHits = append(p.ownHits, ownHits)
		p.shadow = append(p.shadow, shadow)
		p.quota = append(p.quota, quota)
	}
}

// several reports whether two of the items js (indexes into p.items, in
// order) belong to one descriptor.
func (p *plan) several(js []int) bool {
	for k := 1; k < len(js); k++ {
		if p.which[js[k]] == p.which[js[k-1]] {
			return true
		}
	}
	return false
}

// settleSeveral settles the outcomes of one descriptor's several limits
// into st: each into st.Limits, and the most restrictive (Restrictive)
// into st's own fields. Metrics count each limit's outcome.
func (s *Server) settleSeveral(domain string, entries []config.Entry, st *Status, outs []floodgate.Outcome) {
	base := *st
	limits := make([]LimitStatus, len(outs))
	best := base
	for x := range outs {
		sub := base
		s.settle(domain, entries, &sub, &outs[x])
		limits[x] = LimitStatus{Code: sub.Code, Limit: sub.Limit, Decision: sub.Decision, Shadow: sub.Shadow, Err: sub.Err, FailurePolicy: sub.FailurePolicy}
		if x == 0 || Restrictive(limits[x], LimitStatus{Code: best.Code, Decision: best.Decision, Err: best.Err}) {
			best = sub
		}
	}
	*st = best
	st.Limits = limits
}
