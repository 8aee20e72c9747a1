package algorithm

// GCRA is the state of the generic cell rate algorithm (a leaky bucket used
// as a meter): the theoretical arrival time TAT + TATFrac/Limit
// microseconds, the instant at which the bucket would be full again. The
// zero value (any TAT at or before now) is a full bucket. While the clock
// does not go backwards it admits exactly what a TokenBucket with the same
// Params admits, keeping one instant instead of a count and an instant (see
// the package doc for a clock that does). Mirrored by
// store/redisstore/scripts/gcra.lua.
type GCRA struct {
	TAT     int64
	TATFrac int64
}

// Step decides a request of cost units at now, with T = Period/Limit:
// tat = max(TAT, now); the request is admitted if tat + cost*T - Burst*T <= now,
// and then TAT becomes tat + cost*T.
func (s GCRA) Step(p Params, now, cost int64) (_ GCRA, d Decision) {
	// d is the named result, set a field at a time: a Decision built in a
	// variable of its own is copied to the result on return, with wide
	// loads that wait for the narrow stores that just wrote it, which cost
	// the memory store more than this arithmetic (see setDecision in
	// store/memstore).
	if p.Limit <= 0 {
		return GCRA{}, denyAll(cost)
	}
	t := newRate(p.Limit, p.Period)
	nowI := instant{us: now}
	tat := t.norm(instant{s.TAT, s.TATFrac})
	// full: the bucket is full before this request (nothing owed at now).
	full := !nowI.less(tat)
	if full {
		tat = nowI
	}
	burstT := t.times(p.Burst)
	// allowAt = tat + cost*T - Burst*T is the earliest instant the request
	// fits; a cost above Burst never fits (and cost*T is not computed).
	var allowAt instant
	allowed := false
	if cost <= p.Burst {
		next := t.add(tat, t.times(cost))
		allowAt = t.sub(next, burstT)
		if allowed = !nowI.less(allowAt); allowed {
			tat = next
		}
	}
	// The tokens left are floor((Burst*T - (tat - now)) / T): from a full
	// bucket, tat - now is cost*T if admitted and 0 if not, so they are
	// Burst - cost or Burst, exactly.
	var remaining int64
	switch ahead := t.sub(tat, nowI); {
	case full && allowed:
		remaining = p.Burst - cost
	case full:
		remaining = p.Burst
	case ahead.less(burstT):
		remaining = t.count(t.sub(burstT, ahead), p.Burst)
	}
	d.Allowed, d.Limit, d.Remaining = allowed, p.Burst, remaining
	if nowI.less(tat) {
		d.ResetAfter = tat.ceil() - now
	}
	switch {
	case allowed:
	case cost > p.Burst:
		d.RetryAfter = Never
	default:
		d.RetryAfter = allowAt.ceil() - now
	}
	if !nowI.less(tat) {
		return GCRA{}, d
	}
	return GCRA{TAT: tat.us, TATFrac: tat.frac}, d
}

// Expires is when the bucket is full again (TAT rounded up); 0 if unset.
func (s GCRA) Expires(p Params) int64 {
	if s.TAT <= 0 && s.TATFrac <= 0 {
		return 0
	}
	return instant{s.TAT, s.TATFrac}.ceil()
}
