package server

import (
	"context"
	"errors"
	"fmt"
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

// Schedule is Reserve with a wait, for a domain's descriptors: it takes
// the cost of the request's one limited descriptor now, or the earliest
// slot within maxWait (floodgate.Limiter.Schedule). Descriptors in shadow
// mode, unlimited or unmatched hold nothing, as in Reserve; with none
// left the slot is nil and the Result says why. A request whose
// descriptors hold more than one limit is invalid (field "max_wait_ms"):
// the slots of two limits come at different times, and a caller that
// waited for the later would use the earlier's late, when it may be
// another caller's, exceeding that limit's rate at that instant. A limit
// that cannot wait (anything but gcra and token_bucket) is invalid too, named
// "descriptors[i].limit.algorithm" for a descriptor's own limit, else
// "max_wait_ms" with the rule's ID. A store failure is an error, whatever
// the rule's failure mode, as for ScheduleInline.
func (s *Server) Schedule(ctx context.Context, domain string, ds []Descriptor, hits int64, maxWait time.Duration, o *floodgate.ReserveOptions) (*floodgate.Slot, Result, error) {
	res, p, items, which, err := s.planHold(domain, ds, hits)
	if err != nil || len(items) == 0 {
		return nil, res, err
	}
	if len(items) > 1 {
		what := fmt.Sprintf("descriptors[%d] has %d limits", which[0], len(items))
		if which[1] != which[0] {
			what = fmt.Sprintf("descriptors[%d] and descriptors[%d] are limited", which[0], which[1])
		}
		return nil, Result{}, Invalid("max_wait_ms", "a wait takes a slot of one limit, and %s: their slots would come at different times (docs/waiting.md)", what)
	}
	it := items[0]
	slot, d, err := s.lim.Schedule(ctx, it.Key, it.Limit, it.Cost, maxWait, o)
	if err != nil {
		return nil, Result{}, scheduleField(err, p.ds, &res, which[0])
	}
	s.settleEach(domain, p.ds, &res, which, []floodgate.Outcome{{Decision: d, Limit: it.Limit}})
	return slot, res, nil
}

// scheduleField names the field of an invalid Schedule of descriptor i
// (see Schedule); another error is returned as it is.
func scheduleField(err error, ds []Descriptor, res *Result, i int) error {
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	if !ok {
		return err
	}
	switch {
	case fe.Field == "max_wait":
		return &floodgate.FieldError{Kind: fe.Kind, Field: "max_wait_ms", Problem: fe.Problem}
	case fe.Field == "ttl":
		return &floodgate.FieldError{Kind: fe.Kind, Field: "ttl_ms", Problem: fe.Problem}
	case fe.Field == "algorithm" && ds[i].Limit == nil:
		rule := "its rule"
		if r := res.Statuses[i].Rule; r != nil {
			rule = "rule " + r.ID
		}
		return &floodgate.FieldError{Kind: fe.Kind, Field: "max_wait_ms", Problem: fmt.Sprintf("descriptors[%d] is limited by %s: %s", i, rule, fe.Problem)}
	}
	p := plan{which: []int{i}, ownHits: []bool{ds[i].Hits != nil}}
	return p.fieldOf(&floodgate.ItemError{Index: 0, Err: err})
}
