package algorithm

// FixedWindow is the state of a fixed window counter: Count units admitted
// in the window that started at Start (microseconds). The zero value is an
// empty key. Mirrored by store/redisstore/scripts/fixed_window.lua.
type FixedWindow struct {
	Start int64
	Count int64
}

// Step decides a request of cost units at now. A window is live while
// Count > 0 and now < Start+Period; a clock that goes backwards stays in the
// live window and never opens a new one early. A new window starts at the
// multiple of Period at or before now, or at now with FirstHit.
//
// With CountRejected a denied request still adds its cost, but the count
// stops at Limit+1: every count above Limit decides alike (all denied,
// Remaining 0), and the cap keeps the count below MaxExact and away from
// int64 overflow however long a client keeps retrying.
func (s FixedWindow) Step(p Params, now, cost int64) (_ FixedWindow, d Decision) {
	// d is the named result, set a field at a time, as in GCRA.Step.
	start, count := s.Start, s.Count
	if count <= 0 || now >= start+p.Period {
		count = 0
		if p.FirstHit {
			start = now
		} else {
			start = now - now%p.Period
		}
	}
	allowed := count+cost <= p.Limit
	if allowed {
		count += cost
	} else if p.CountRejected {
		count = min(count+cost, p.Limit+1)
	}
	d.Allowed, d.Limit, d.Remaining = allowed, p.Limit, max(0, p.Limit-count)
	if count > 0 {
		d.ResetAfter = start + p.Period - now
	} else {
		start = 0
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = start + p.Period - now
	}
	return FixedWindow{Start: start, Count: count}, d
}

// Expires is when the state becomes equal to the zero state, in
// microseconds; 0 for the zero state. Stores drop the key then (a Redis TTL).
func (s FixedWindow) Expires(p Params) int64 {
	if s.Count <= 0 {
		return 0
	}
	return s.Start + p.Period
}
