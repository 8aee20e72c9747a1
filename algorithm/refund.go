package algorithm

// Refund gives back units of a request admitted at at (microseconds), as a
// settled reservation does: the window that counted them is still live, so
// its count goes down by units, at most by its count. Units counted by a
// window that has ended are not given back: that window's budget is gone,
// and the new window owes nothing (refunded 0). It returns the state and
// how many units it gave back.
func (s FixedWindow) Refund(p Params, now, at, units int64) (FixedWindow, int64) {
	end := s.end(&p)
	live := s.Count > 0 && now < end
	if !live || units <= 0 || at < s.Start || at >= end {
		return s, 0
	}
	back := min(units, s.Count)
	s.Count -= back
	if s.Count <= 0 {
		return FixedWindow{}, back
	}
	return s, back
}

// Refund gives back units admitted at at: from the current window's count
// if at is in it, from the previous window's (whose weight is shrinking)
// if at is in that one, and not at all once the window that counted them
// has left the estimate (refunded 0).
func (s SlidingWindow) Refund(p Params, now, at, units int64) (SlidingWindow, int64) {
	// Bring the state to now's window first, as Step does.
	start := now - now%p.Period
	switch {
	case s.Prev <= 0 && s.Curr <= 0:
		return SlidingWindow{}, 0
	case start == s.Start:
	case start == s.Start+p.Period:
		s = SlidingWindow{Start: start, Prev: s.Curr}
	case start < s.Start:
		start = s.Start // the clock went backwards: stay in the stored window
	default:
		return SlidingWindow{}, 0
	}
	var back int64
	switch {
	case units <= 0:
	case at >= start && at < start+p.Period:
		back = min(units, s.Curr)
		s.Curr -= back
	case at >= start-p.Period && at < start:
		back = min(units, s.Prev)
		s.Prev -= back
	}
	if s.Prev <= 0 && s.Curr <= 0 {
		return SlidingWindow{}, back
	}
	return s, back
}

// Refund gives back units admitted at at: it removes up to units log
// entries stamped at (entries of one instant are alike), none once they
// have left the trailing Period. Like Step, it reuses the capacity of
// s.Log.
func (s SlidingWindowLog) Refund(p Params, now, at, units int64) (SlidingWindowLog, int64) {
	if units <= 0 || at <= now-p.Period {
		return s, 0
	}
	log := s.Log
	i := 0
	for i < len(log) && log[i] < at {
		i++
	}
	j := i
	for j < len(log) && log[j] == at && int64(j-i) < units {
		j++
	}
	back := int64(j - i)
	if back > 0 {
		log = append(log[:i], log[j:]...)
	}
	return SlidingWindowLog{Log: log}, back
}

// Refund gives back units taken from the bucket: the missing tokens go
// down by units, at most by the tokens missing once those earned since
// are credited (a bucket is never more than full). The time of the
// request does not matter: every token is alike. An empty bucket in debt
// (its last credit after now, see Params.Wait) gives back the tokens it
// owes first, moving its last credit back by units*T, as GCRA moves its
// TAT, and then the missing tokens: the two stay equivalent.
func (s TokenBucket) Refund(p Params, now, _, units int64) (TokenBucket, int64) {
	if p.Limit <= 0 || units <= 0 {
		return s, 0
	}
	t := newRate(p.Limit, p.Period)
	taken, last := s.credit(p, t, now)
	var back int64
	if nowI := (instant{us: now}); taken == p.Burst && nowI.less(last) {
		// The whole tokens owed: those not credited by now, ceil((last-now)/T).
		owed := t.count(t.sub(last, nowI), MaxLimit)
		if t.add(nowI, t.times(owed)).less(last) {
			owed++
		}
		back = min(units, owed)
		last = t.sub(last, t.times(back))
		units -= back
	}
	b := min(units, taken)
	taken -= b
	back += b
	if taken == 0 {
		return TokenBucket{}, back
	}
	return TokenBucket{Taken: taken, Last: last.us, LastFrac: last.frac}, back
}

// Refund gives back units: the theoretical arrival time moves back by
// units*T, but not before now (a full bucket), so the units given back are
// at most those still owed, counted as TokenBucket counts its missing
// tokens: the two stay equivalent.
func (s GCRA) Refund(p Params, now, _, units int64) (GCRA, int64) {
	if p.Limit <= 0 || units <= 0 {
		return s, 0
	}
	t := newRate(p.Limit, p.Period)
	nowI := instant{us: now}
	tat := t.norm(instant{s.TAT, s.TATFrac})
	if !nowI.less(tat) {
		return GCRA{}, 0
	}
	// The whole tokens missing: those not yet earned back, ceil((tat-now)/T).
	owed := t.count(t.sub(tat, nowI), p.Burst)
	if t.add(nowI, t.times(owed)).less(tat) {
		owed++
	}
	owed = min(owed, p.Burst)
	back := min(units, owed)
	tat = t.sub(tat, t.times(back))
	if !nowI.less(tat) {
		return GCRA{}, back
	}
	return GCRA{TAT: tat.us, TATFrac: tat.frac}, back
}
