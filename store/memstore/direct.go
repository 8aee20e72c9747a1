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
	i, ref := s.locate(r.Key, period)
	if s.system {
		nowUS = systemMicros() // s.clockNow, without its call
	} else {
		nowUS = s.clock.Now().UnixMicro()
	}
	sh := &s.shards[i]
	var d algorithm.Decision
	sh.mu.Lock()
	stepSlot(&d, &sh.small[r.Kind], r.Kind, r.Params(), ref, nowUS, 0, r.Cost, true)
	sh.mu.Unlock()
	return d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, nowUS, true
}
