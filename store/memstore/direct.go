package memstore

import (
	"github.com/floodgate-rl/floodgate/algorithm"
	"github.com/floodgate-rl/floodgate/internal/direct"
)

var _ direct.Decider = (*Store)(nil)

// DecideSmall is Apply for a validated Request of an O(1) algorithm with
// no Now, given in parts by floodgate.Limiter (see package
// internal/direct, whose type its argument is: code outside this module
// cannot build one): the same steps as Apply's after validation,
// without the Request and Decision copies. A bounded store (MaxKeys,
// MaxBytes) answers ok false, deciding nothing: its room check stays on
// Apply's path alone. Callers want floodgate.Limiter.Allow, or Apply.
func (s *Store) DecideSmall(r direct.Small) (allowed bool, limit, remaining, resetAfterUS, retryAfterUS, nowUS int64, ok bool) {
	if s.bounded {
		return false, 0, 0, 0, 0, 0, false
	}
	// Located as keyPeriod locates Apply's: a first-hit window apart
	// from an aligned one of the same key and period.
	period := r.Period
	if r.Flags&direct.FirstHit != 0 {
		period += firstHitPeriod
	}
	// The Params are made here, before the lock, not as stepSlot's
	// argument: a struct made a field at a time and copied at once to
	// the call's arguments with wide loads makes those loads wait for
	// the stores (a store forwarding stall, about 5 ns a decision), and
	// the lock's atomic instruction drains the stores first.
	var p algorithm.Params // r.Params(), a field at a time: see above
	p.Limit, p.Period, p.Burst = r.Limit, r.Period, r.Burst
	p.FirstHit, p.CountRejected = r.Flags&direct.FirstHit != 0, r.Flags&direct.CountRejected != 0
	i, ref := s.locate(r.Key, period)
	if s.system {
		nowUS = systemMicros() // s.clockNow, without its call
	} else {
		nowUS = s.clock.Now().UnixMicro()
	}
	sh := &s.shards[i]
	var d algorithm.Decision
	t := &sh.small[r.Kind]
	sh.mu.Lock()
	if e := t.hot(ref); e != nil {
		// stepSlot for a key found where it was last found (a hot key),
		// with the state changed in its entry: no find or set call.
		old := e.v.st
		e.v.st.StepTo(r.Kind, &d, p, nowUS, r.Cost)
		if e.v.st != old {
			if exp := e.v.st.Expires(r.Kind, p); exp > 0 {
				e.v.exp = exp
			} else {
				t.del(ref)
			}
		}
	} else {
		stepSlot(&d, t, r.Kind, p, ref, nowUS, 0, r.Cost, true)
	}
	sh.mu.Unlock()
	return d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, nowUS, true
}
