package algorithm

// FixedWindow is the state of a fixed window counter: Count units admitted
// in the window that started at Start (microseconds). The zero value is an
// empty key. Mirrored by store/redisstore/scripts/fixed_window.lua.
type FixedWindow struct {
	Start int64
	Count int64
	// Next is where a calendar window ends (Params.Calendar), the start of
	// the next one; 0 for every other window, which ends at Start+Period.
	Next int64
}

// end is where the state's window ends.
func (s FixedWindow) end(p *Params) int64 {
	if p.Calendar != nil {
		return s.Next
	}
	return s.Start + p.Period
}

// Step decides a request of cost units at now. A window is live while
// Count > 0 and now < Start+Period; a clock that goes backwards stays in the
// live window and never opens a new one early. A new window starts at the
// multiple of Period at or before now, or at now with FirstHit, or, for a
// calendar limit, is the window of Params.Calendar that contains now.
//
// With CountRejected a denied request still adds its cost, but the count
// stops at Limit+1: every count above Limit decides alike (all denied,
// Remaining 0), and the cap keeps the count below MaxExact and away from
// int64 overflow however long a client keeps retrying.
func (s FixedWindow) Step(p Params, now, cost int64) (_ FixedWindow, d Decision) {
	// d is the named result, set a field at a time, as in GCRA.Step.
	start, count := s.Start, s.Count
	end := s.end(&p)
	if count <= 0 || now >= end {
		count = 0
		switch {
		case p.Calendar != nil:
			start, end, _ = p.Calendar.Window(now)
		case p.FirstHit:
			start, end = now, now+p.Period
		default:
			start = now - now%p.Period
			end = start + p.Period
		}
	}
	allowed := count+cost <= p.Limit
	if allowed {
		count += cost
	} else if p.CountRejected {
		count = min(count+cost, p.Limit+1)
	}
	d.Allowed, d.Limit, d.Remaining = allowed, p.Limit, max(0, p.Limit-count)
	var next int64 // 0 but for a calendar window's count
	if count > 0 {
		d.ResetAfter = end - now
		if p.Calendar != nil {
			next = end
		}
	} else {
		start = 0
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = end - now
	}
	return FixedWindow{Start: start, Count: count, Next: next}, d
}

// Expires is when the state becomes equal to the zero state, in
// microseconds; 0 for the zero state. Stores drop the key then (a Redis TTL).
func (s FixedWindow) Expires(p Params) int64 {
	if s.Count <= 0 {
		return 0
	}
	return s.end(&p)
}

// WindowAt is the window a FixedWindow of p opens at now, start <= now <
// end: the calendar window of Params.Calendar that contains now, else the
// multiple of Period at or before now (with FirstHit the window that would
// start at now).
func (p *Params) WindowAt(now int64) (start, end int64) {
	switch {
	case p.Calendar != nil:
		start, end, _ = p.Calendar.Window(now)
		return start, end
	case p.FirstHit:
		return now, now + p.Period
	}
	start = now - now%p.Period
	return start, start + p.Period
}
