package server

import (
	"context"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// ScheduleInline takes cost of an inline key under limit now, or the
// earliest slot within maxWait (floodgate.Limiter.Schedule): the slot's
// Reservation settles it, its Delay is how long the caller waits. A
// period above Options.MaxOwnPeriod is invalid (field "limit.period").
func (s *Server) ScheduleInline(ctx context.Context, key string, limit floodgate.Limit, cost int64, maxWait time.Duration, o *floodgate.ReserveOptions) (*floodgate.Slot, Status, error) {
	if err := s.checkOwnPeriod("limit.period", limit.Period); err != nil {
		return nil, Status{}, err
	}
	if err := checkInlineKey(key); err != nil {
		return nil, Status{}, err
	}
	slot, d, err := s.lim.Schedule(ctx, inlineKey(key), limit, cost, maxWait, o)
	if err != nil {
		return nil, Status{}, inlineField(err)
	}
	st := Status{Code: OK, Limited: true}
	out := floodgate.Outcome{Decision: d, Limit: limit}
	s.settle("", nil, &st, &out)
	return slot, st, nil
}
