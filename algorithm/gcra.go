package algorithm

import "math/bits"

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
//
// It counts in ticks of 1/Limit µs, in which T is Period ticks, Burst*T
// is Burst*Period and tat - now is (TAT-now)*Limit + TATFrac: when these
// fit in 61 bits (checked exactly, with the high word of each product),
// admission and Remaining are comparisons and one 64-bit division, and
// the new TAT carries whole microseconds out of TATFrac with no division
// when cost*Period < Limit. Otherwise stepExact decides, with the
// (microseconds, fraction) instants and 128-bit counts; both give the same
// answer to every input (TestGCRAFastIsExact).
func (s GCRA) Step(p Params, now, cost int64) (st GCRA, d Decision) {
	st = s.stepTo(&d, p, now, cost)
	return st, d
}

// stepTo is Step writing the Decision to *d, a field at a time: a
// Decision (too many fields for the compiler to keep in registers)
// returned by a call is stored a field at a time to a temporary and then
// copied with 16-byte loads, which cannot take their bytes from two
// pending stores and wait for them to reach the cache (see setDecision in
// store/memstore). Small.StepTo, the memory store's hot path, calls it
// with the store's own Decision.
func (s GCRA) stepTo(d *Decision, p Params, now, cost int64) GCRA {
	if p.Limit <= 0 {
		*d = denyAll(cost)
		return GCRA{}
	}
	l := p.Limit
	hi, bt := bits.Mul64(uint64(p.Burst), uint64(p.Period))
	if hi != 0 || bt > maxTicks || p.Burst < 0 || p.Period <= 0 || cost < 0 || l > MaxLimit {
		return s.stepExactTo(d, p, now, cost)
	}
	burstTicks := int64(bt)
	// tat = max(norm(TAT, TATFrac), now); ahead = tat - now, in ticks.
	us, frac := s.TAT, s.TATFrac
	if frac >= l {
		frac = l - 1
	}
	if frac < 0 {
		frac = 0
	}
	var ahead int64
	full := us < now || us == now && frac == 0
	if full {
		us, frac = now, 0
	} else {
		// us >= now: a difference that overflowed is negative, above
		// maxTicks as a uint64.
		h, a := bits.Mul64(uint64(us-now), uint64(l))
		if h != 0 || a > maxTicks {
			return s.stepExactTo(d, p, now, cost)
		}
		ahead = int64(a) + frac
	}
	// Admitted if ahead + cost*T <= Burst*T; cost*Period <= burstTicks
	// when cost <= Burst, so no sum here reaches 2^63.
	allowed := false
	var costTicks int64
	if cost <= p.Burst {
		costTicks = cost * p.Period
		allowed = ahead+costTicks <= burstTicks
	}
	after := ahead // tat - now after this request
	if allowed {
		after += costTicks
		// tat += cost*T: the fraction carries whole microseconds.
		x := frac + costTicks
		switch {
		case x < l:
		case x < 2*l:
			us, x = us+1, x-l
		default:
			us, x = us+x/l, x%l
		}
		frac = x
	}
	// The tokens left are floor((Burst*T - (tat - now)) / T), as in
	// stepExact: from a full bucket Burst - cost or Burst, exactly.
	var remaining int64
	switch {
	case full && allowed:
		remaining = p.Burst - cost
	case full:
		remaining = p.Burst
	case after < burstTicks:
		remaining = (burstTicks - after) / p.Period
	}
	var reset, retry int64
	if after > 0 {
		reset = us - now
		if frac > 0 {
			reset++
		}
	}
	switch {
	case allowed:
	case cost > p.Burst:
		retry = Never
	default:
		// allowAt - now = ahead + cost*T - Burst*T > 0 ticks, rounded up
		// to microseconds.
		retry = (ahead + costTicks - burstTicks + l - 1) / l
	}
	// Every field, whatever *d held before.
	d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter = allowed, p.Burst, remaining, reset, retry
	if after <= 0 {
		return GCRA{}
	}
	return GCRA{TAT: us, TATFrac: frac}
}

// stepExactTo is stepExact writing the Decision to *d.
func (s GCRA) stepExactTo(d *Decision, p Params, now, cost int64) GCRA {
	st, r := s.stepExact(p, now, cost)
	*d = r
	return st
}

// maxTicks bounds Step's counts of ticks (Burst*Period and tat - now):
// tat - now + cost*Period + Limit, the largest sum, stays below
// 2*maxTicks + 2*MaxLimit < 2^63.
const maxTicks = 1 << 61

// stepExact is Step on instants of whole microseconds and a fraction, with
// the counts in 128 bits: exact for every input, at the cost of up to
// three divisions.
func (s GCRA) stepExact(p Params, now, cost int64) (_ GCRA, d Decision) {
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
