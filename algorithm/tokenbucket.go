package algorithm

// TokenBucket is the state of a token bucket of capacity Burst that gains
// one token every T = Period/Limit: Taken tokens are missing from a full
// bucket, and the last of them was credited at the instant Last + LastFrac/Limit
// microseconds. The zero value is a full bucket (an empty key). Mirrored by
// store/redisstore/scripts/token_bucket.lua.
//
// Time is kept with a fraction of a microsecond in units of 1/Limit, so the
// interval Period/Limit is exact: 3 per second credits a token every
// 333333 1/3 µs, not every 333333 µs.
type TokenBucket struct {
	Taken    int64
	Last     int64
	LastFrac int64
}

// Step decides a request of cost units at now. It first credits the whole
// tokens earned since Last (at most Taken of them), then admits the request
// if the tokens in the bucket, Burst - Taken, are at least cost. A request
// taken from a full bucket starts the refill clock at now. Taken is read as
// at most Burst: a bucket never holds fewer than 0 tokens.
//
// With p.Wait, a request that finds too few tokens is admitted if the
// tokens it lacks are credited within p.Wait intervals: the bucket is then
// empty (Taken = Burst) and its last credit moves to the instant the last
// of them is credited, which may be after now. Credit earns nothing before
// that instant, so every later request queues behind the debt; the
// request's slot is that instant, ResetAfter less Burst*T.
func (s TokenBucket) Step(p Params, now, cost int64) (_ TokenBucket, d Decision) {
	// d is the named result, set a field at a time, as in GCRA.Step.
	if p.Limit <= 0 {
		return TokenBucket{}, denyAll(cost)
	}
	t := newRate(p.Limit, p.Period)
	taken, last := s.credit(p, t, now)
	nowI := instant{us: now}
	if taken == 0 {
		last = nowI
	}
	allowed := p.Burst-taken >= cost
	var at instant // when the tokens of a denied cost are there
	if allowed {
		taken += cost
	} else if cost <= p.Burst {
		at = t.add(last, t.times(cost-(p.Burst-taken)))
		if p.Wait > 0 && !t.add(nowI, t.times(p.Wait)).less(at) {
			// Admitted in debt: the bucket is empty until at, when the
			// last of the tokens it owes this request is credited.
			allowed, taken, last = true, p.Burst, at
		}
	}
	d.Allowed, d.Limit, d.Remaining = allowed, p.Burst, max(0, p.Burst-taken)
	if taken > 0 {
		d.ResetAfter = t.add(last, t.times(taken)).ceil() - now
	}
	switch {
	case allowed:
	case cost > p.Burst:
		d.RetryAfter = Never
	default:
		if p.Wait > 0 {
			// A request that waits as long is admitted from Wait*T before.
			at = t.sub(at, t.times(p.Wait))
		}
		d.RetryAfter = at.ceil() - now
	}
	if taken == 0 {
		return TokenBucket{}, d
	}
	return TokenBucket{Taken: taken, Last: last.us, LastFrac: last.frac}, d
}

// credit is the bucket at now: the tokens missing once the whole tokens
// earned since Last are credited (at most Taken of them), and the instant
// the last of them was credited. A state kept under a larger Burst (a
// store shares it when a limit changes) is read under this one: the
// bucket is at most empty, which also keeps taken*T within the bounds
// Validate checks for p.
func (s TokenBucket) credit(p Params, t rate, now int64) (taken int64, last instant) {
	taken = min(max(0, s.Taken), p.Burst)
	last = t.norm(instant{s.Last, s.LastFrac})
	if nowI := (instant{us: now}); taken > 0 && last.less(nowI) {
		n := t.count(t.sub(nowI, last), taken)
		taken -= n
		last = t.add(last, t.times(n))
	}
	return taken, last
}

// Expires is when the bucket is full again; 0 if it is full.
func (s TokenBucket) Expires(p Params) int64 {
	if s.Taken <= 0 || p.Limit <= 0 {
		return 0
	}
	t := newRate(p.Limit, p.Period)
	return t.add(t.norm(instant{s.Last, s.LastFrac}), t.times(min(s.Taken, p.Burst))).ceil()
}

// denyAll is the decision of a limit of zero: every request of cost above
// zero is denied for ever; a peek is allowed with nothing remaining.
func denyAll(cost int64) Decision {
	d := Decision{Allowed: cost <= 0}
	if !d.Allowed {
		d.RetryAfter = Never
	}
	return d
}
