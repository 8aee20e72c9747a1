package floodgate

import (
	"context"
	"math/bits"
	"time"
)

// MaxWait is the longest a caller may wait for a slot (WaitN, Schedule).
const MaxWait = time.Hour

// Slot is a place in the queue of a key, taken by Limiter.Schedule: a
// reservation of the units, admitted now (Delay 0) or at Now+Delay. The
// caller proceeds at At, or gives the slot back with Cancel before, once.
type Slot struct {
	// Reservation holds the slot's units in the store; its Cancel gives
	// them back exactly once (a retry of the cancel is answered as the
	// first, see Reserver), its Commit settles the slot as used. A slot
	// left alone expires charged (Reservation.Expires, after At).
	*Reservation
	// Delay is how long after the decision the caller may proceed: 0 when
	// admitted now; at most the maxWait asked for.
	Delay time.Duration
	// At is the decision's time plus Delay, on the store's clock (the
	// Limiter's Clock when set).
	At time.Time
}

// Wait waits for one unit of key under limit, at most maxWait. See WaitN.
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit, maxWait time.Duration) (Decision, error) {
	return l.WaitN(ctx, key, limit, 1, maxWait)
}

// WaitN takes n units of key under limit now, or takes the earliest
// future slot within maxWait and sleeps until it: the slot is taken in
// the store in one atomic step (Schedule), so callers waiting on one key
// in any number of processes are served in the order the store saw them
// and the limit's rate holds. The Decision is the reserve's: Allowed
// false (nothing taken, nothing slept) when no slot is free within
// maxWait, RetryAfter then saying when one would be. If ctx is done
// before the slot, the slot is given back (Reservation.Cancel, exactly
// once) and ctx's error returned with the decision. Only GCRA and
// TokenBucket limits wait (see Schedule); the sleep is on the process
// clock.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int64, maxWait time.Duration) (Decision, error) {
	s, d, err := l.Schedule(ctx, key, limit, n, maxWait, nil)
	if err != nil || !d.Allowed || s.Delay <= 0 {
		return d, err
	}
	t := time.NewTimer(s.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return d, nil
	case <-ctx.Done():
		// The caller is gone: give the slot back, on a context of its
		// own, as the caller's is done.
		cctx, cancel := l.withTimeout(context.WithoutCancel(ctx))
		defer cancel()
		if _, cerr := s.Cancel(cctx); cerr != nil {
			return d, cerr
		}
		return d, ctx.Err()
	}
}

// Schedule takes n units of key under limit now, or the earliest future
// slot within maxWait, in one atomic step of the store, and returns it
// without sleeping: the service answers with the Delay, and a caller
// that will not use the slot gives it back with Cancel. The slot is a
// reservation (see Reserve; o as there, with a TTL of maxWait plus a
// second when o.TTL is 0), so the store must be a Reserver.
//
// Only GCRA and TokenBucket limits can take a future slot, with T =
// Period/Limit the emission interval and W = floor(maxWait/T) the whole
// intervals in maxWait. GCRA: the store's step admits the request when
// its theoretical arrival time, less the burst, is at most now + W*T;
// the TAT then owes the slot. TokenBucket: a request that finds too few
// tokens is admitted when the last token it lacks is credited within
// W*T of now, and the bucket goes into debt by at most W units
// (algorithm.Params.Wait): it stays empty until that instant, its slot.
// Either way every later request on the key (waiting or not) is decided
// after the slot, and a cancel gives the units back from the debt first.
// maxWait is thus counted in whole intervals (100 ms at 10 per second):
// a slot that is less than one interval inside maxWait may be refused.
// The rate is never exceeded: the slots taken are the admissions of a
// bucket of the limit's burst. Other algorithms are refused with an
// error wrapping ErrInvalidLimit (docs/waiting.md says why); maxWait 0
// is AllowN with a reservation. The Decision has the limit's capacity as
// Limit and, when allowed, what is left now as Remaining.
func (l *Limiter) Schedule(ctx context.Context, key string, limit Limit, n int64, maxWait time.Duration, o *ReserveOptions) (*Slot, Decision, error) {
	wl, w, err := waitLimit(limit, n, maxWait)
	if err != nil {
		return nil, Decision{RetryAfter: Never}, err
	}
	var opts ReserveOptions
	if o != nil {
		opts = *o
	}
	if opts.TTL == 0 {
		opts.TTL = min(maxWait+time.Second, MaxHoldTTL)
	}
	if opts.TTL < maxWait {
		return nil, Decision{RetryAfter: Never}, fieldErr(ErrInvalidRequest, "ttl", "%v is shorter than max_wait %v: a slot must be held until it comes", opts.TTL, maxWait)
	}
	res, d, err := l.Reserve(ctx, key, wl, n, &opts)
	d.Limit = limit.Capacity()
	if wl.Burst != limit.Burst {
		d.Remaining = max(0, d.Remaining-w) // decided under the raised burst
	}
	if err != nil || res == nil {
		return nil, d, err
	}
	s := &Slot{Reservation: res, At: d.Now}
	if d.Allowed && res.Held {
		s.Delay = slotDelay(d, limit, maxWait)
		s.At = d.Now.Add(s.Delay)
	}
	return s, d, nil
}

// waitLimit is the limit a wait of maxWait reserves under, and W =
// floor(maxWait/T), the debt it may leave (see Schedule): for GCRA the
// limit with its burst raised by W units, for TokenBucket the limit whose
// bucket may owe W units (Params.Wait); an error
// for an invalid request, an algorithm that cannot wait, or a maxWait
// whose raised burst would leave the exact range (Limit.Validate).
func waitLimit(limit Limit, n int64, maxWait time.Duration) (Limit, int64, error) {
	if err := limit.Validate(); err != nil {
		return limit, 0, err
	}
	switch {
	case maxWait < 0 || maxWait > MaxWait:
		return limit, 0, fieldErr(ErrInvalidRequest, "max_wait", "%v is not between 0 and %v", maxWait, MaxWait)
	case maxWait%time.Microsecond != 0:
		return limit, 0, fieldErr(ErrInvalidRequest, "max_wait", "%v is not a whole number of microseconds", maxWait)
	case limit.EffectiveAlgorithm() != GCRA && limit.EffectiveAlgorithm() != TokenBucket:
		return limit, 0, fieldErr(ErrInvalidLimit, "algorithm", "only gcra and token_bucket can take a future slot, not %s (see docs/waiting.md)", limit.EffectiveAlgorithm())
	case n < 1:
		return limit, 0, fieldErr(ErrInvalidRequest, "cost", "a wait takes at least 1 unit, not %d", n)
	case limit.Limit == 0 || n > limit.Capacity():
		// Never admitted under the real burst, whatever the wait.
		return limit, 0, fieldErr(ErrInvalidRequest, "cost", "%d is above the capacity %d: it can never pass", n, limit.Capacity())
	}
	p := limit.Params()
	// W = floor(maxWait*Limit/Period), in 128 bits.
	hi, lo := bits.Mul64(uint64(maxWait.Microseconds()), uint64(p.Limit))
	var w int64
	if q := uint64(p.Period); hi < q {
		wq, _ := bits.Div64(hi, lo, q)
		w = int64(min(wq, uint64(MaxLimit)))
	} else {
		w = MaxLimit
	}
	wl := limit
	wl.Burst = p.Burst + w
	if err := wl.Validate(); err != nil {
		return limit, 0, fieldErr(ErrInvalidRequest, "max_wait", "%v is too long for %v: the units it may owe leave the exact range", maxWait, limit)
	}
	if limit.EffectiveAlgorithm() == TokenBucket {
		// The bucket keeps its burst and may owe w units
		// (algorithm.Params.Wait); the raised burst above only checked
		// that (Burst+w)*T stays exact.
		wl.Burst, wl.wait = limit.Burst, w
	}
	return wl, w, nil
}

// slotDelay is the delay of a slot admitted in debt: its arrival time
// less the real burst's Burst*T, after the decision (for a TokenBucket,
// the bucket's last credit: it is full Burst*T after it). The store
// reports ResetAfter, the TAT rounded up; Burst*T is rounded down
// here, so the delay is never early and at most 2 µs late, and never
// above maxWait.
func slotDelay(d Decision, limit Limit, maxWait time.Duration) time.Duration {
	p := limit.Params()
	hi, lo := bits.Mul64(uint64(p.Burst), uint64(p.Period))
	burstT, _ := bits.Div64(hi, lo, uint64(p.Limit)) // hi < Limit: Burst*Period/Limit <= MaxPeriod
	delay := d.ResetAfter - time.Duration(burstT)*time.Microsecond
	return min(max(0, delay), maxWait)
}
