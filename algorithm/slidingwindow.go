package algorithm

// SlidingWindow is the state of a sliding window counter: Curr units
// admitted in the window that started at Start (a multiple of Period since
// the epoch) and Prev in the window before it. The zero value is an empty
// key. Mirrored by store/redisstore/scripts/sliding_window.lua.
type SlidingWindow struct {
	Start int64
	Prev  int64
	Curr  int64
}

// Step decides a request of cost units at now. With e = now - Start, the
// weight of the previous window is the exact fraction w =
// Prev*(Period-e)/Period, and the request is admitted if w + Curr + cost <=
// Limit. The comparison is exact: it is made on ceil(w) =
// floor((Prev*(Period-e) + Period - 1)/Period), and ceil(w) <= R if and only
// if w <= R for an integer R. Remaining = Limit - ceil(w) - Curr, the
// largest cost that would be admitted. Counts never exceed Limit
// (CountRejected saturates at Limit), so every product stays below
// (Limit+1)*Period <= MaxExact.
func (s SlidingWindow) Step(p Params, now, cost int64) (_ SlidingWindow, d Decision) {
	// d is the named result, set a field at a time, as in GCRA.Step.
	start, prev, curr := now-now%p.Period, int64(0), int64(0)
	switch {
	case s.Prev <= 0 && s.Curr <= 0:
	case start == s.Start:
		prev, curr = s.Prev, s.Curr
	case start == s.Start+p.Period:
		prev = s.Curr
	case start < s.Start:
		// The clock went backwards: stay in the stored window.
		start, prev, curr = s.Start, s.Prev, s.Curr
	}
	prev, curr = min(prev, p.Limit), min(curr, p.Limit)
	elapsed := max(0, now-start)
	weighted := floorDiv(prev*(p.Period-elapsed)+p.Period-1, p.Period) // ceil(w)
	allowed := weighted+curr+cost <= p.Limit
	if allowed {
		curr += cost
	} else if p.CountRejected {
		curr = min(curr+cost, p.Limit)
	}
	d.Allowed, d.Limit, d.Remaining = allowed, p.Limit, max(0, p.Limit-weighted-curr)
	switch {
	case curr > 0:
		d.ResetAfter = start + 2*p.Period - now
	case prev > 0:
		d.ResetAfter = start + p.Period - now
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		d.RetryAfter = slidingRetry(p, start, prev, curr, cost) - now
	}
	if prev <= 0 && curr <= 0 {
		return SlidingWindow{}, d
	}
	return SlidingWindow{Start: start, Prev: prev, Curr: curr}, d
}

// slidingRetry is the first instant at which a request of cost <= Limit is
// admitted if nothing else happens: the first elapsed time in this window at
// which the previous window's weight has shrunk enough, else the same in the
// next window (where Curr becomes Prev), else the start of the window after.
func slidingRetry(p Params, start, prev, curr, cost int64) int64 {
	if e, ok := slidingFirst(p, prev, p.Limit-curr-cost); ok {
		return start + e
	}
	if e, ok := slidingFirst(p, curr, p.Limit-cost); ok {
		return start + p.Period + e
	}
	return start + 2*p.Period
}

// slidingFirst is the least elapsed time e in [0, Period) with
// ceil(prev*(Period-e)/Period) <= room, that is prev*(Period-e) <=
// room*Period, if there is one: e = Period - floor(room*Period/prev) when
// prev > room (room*Period <= Limit*Period stays exact).
func slidingFirst(p Params, prev, room int64) (int64, bool) {
	if room < 0 {
		return 0, false
	}
	if prev <= room {
		return 0, true
	}
	e := p.Period - floorDiv(room*p.Period, prev)
	return e, e < p.Period
}

// Expires is when the state becomes equal to the zero state; 0 if empty.
func (s SlidingWindow) Expires(p Params) int64 {
	switch {
	case s.Curr > 0:
		return s.Start + 2*p.Period
	case s.Prev > 0:
		return s.Start + p.Period
	}
	return 0
}
