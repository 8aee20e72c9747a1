package algorithm

import "slices"

// SlidingWindowLog is the state of a sliding window log: the time of every
// unit admitted in the trailing Period, in ascending order (a request of
// cost n adds n entries). The zero value is an empty key. Mirrored by
// store/redisstore/scripts/sliding_window_log.lua, which keeps the log in a
// sorted set.
type SlidingWindowLog struct {
	Log []int64
}

// Step decides a request of cost units at now: admitted if the entries
// newer than now-Period plus cost are at most Limit. Entries at or before
// now-Period are dropped. Step reuses the capacity of s.Log: the returned
// state may share its array, so the caller must not keep using s.
func (s SlidingWindowLog) Step(p Params, now, cost int64) (SlidingWindowLog, Decision) {
	cutoff := now - p.Period
	drop := 0
	for drop < len(s.Log) && s.Log[drop] <= cutoff {
		drop++
	}
	log := s.Log
	if drop > 0 {
		n := copy(log, log[drop:])
		log = log[:n]
	}
	n := int64(len(log))
	allowed := n+cost <= p.Limit
	if allowed && cost > 0 {
		// Keep the log sorted even when the clock went backwards: insert
		// before the first entry later than now.
		i, _ := slices.BinarySearch(log, now+1)
		c := int(cost)
		log = slices.Grow(log, c)[:len(log)+c]
		copy(log[i+c:], log[i:len(log)-c])
		for j := i; j < i+c; j++ {
			log[j] = now
		}
		n += cost
	}
	d := Decision{Allowed: allowed, Limit: p.Limit, Remaining: max(0, p.Limit-n)}
	if n > 0 {
		d.ResetAfter = log[n-1] + p.Period - now
	}
	switch {
	case allowed:
	case cost > p.Limit:
		d.RetryAfter = Never
	default:
		// The oldest n+cost-Limit entries must leave the window first.
		d.RetryAfter = log[n+cost-p.Limit-1] + p.Period - now
	}
	if n == 0 {
		log = log[:0]
	}
	return SlidingWindowLog{Log: log}, d
}

// Expires is when the state becomes equal to the zero state; 0 if empty.
func (s SlidingWindowLog) Expires(p Params) int64 {
	if len(s.Log) == 0 {
		return 0
	}
	return s.Log[len(s.Log)-1] + p.Period
}
