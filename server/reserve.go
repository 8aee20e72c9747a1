package server

import (
	"context"

	"github.com/floodgate-rl/floodgate"
)

// Reserve holds the cost of the limited descriptors of one request of
// domain, all or nothing, as Decide decides them (rules in shadow mode,
// unlimited and unmatched descriptors hold nothing).
func (s *Server) Reserve(ctx context.Context, domain string, ds []Descriptor, hits int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Result, error) {
	if s.tr != nil {
		return s.reserveTraced(ctx, domain, ds, hits, o)
	}
	return s.reserve(ctx, domain, ds, hits, o)
}

func (s *Server) reserve(ctx context.Context, domain string, ds []Descriptor, hits int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Result, error) {
	res, p, items, which, err := s.planHold(domain, ds, hits)
	if err != nil || len(items) == 0 {
		return nil, res, err
	}
	r, outs, err := s.reserveItems(ctx, items, o)
	if outs == nil && err != nil {
		p.which = which
		return nil, Result{}, p.fieldOf(err)
	}
	s.settleEach(domain, p.ds, &res, which, outs)
	return r, res, nil
}

// planHold is the plan of a hold (Reserve, Schedule) of a checked
// request, and the items to hold with the descriptor of each (which):
// none for the descriptors in shadow mode, unlimited or unmatched.
func (s *Server) planHold(domain string, ds []Descriptor, hits int64) (Result, plan, []floodgate.Item, []int, error) {
	if err := checkRequest(domain, ds); err != nil {
		return Result{}, plan{}, nil, nil, err
	}
	res, p, err := s.plan(domain, ds, hits)
	if err != nil {
		return Result{}, plan{}, nil, nil, err
	}
	for i := range res.Statuses {
		// A reservation holds every limited descriptor or none: a quota
		// (quota_mode, -quota-mode) is held like any other limit.
		res.Statuses[i].Quota = false
	}
	var items []floodgate.Item
	var which []int
	for j, it := range p.items {
		if p.shadow[j] {
			// Shadow mode decides and never denies: it holds nothing.
			res.Statuses[p.which[j]].Limited = false
			continue
		}
		// A reservation holds the whole limit: a rule's default class
		// is for decisions (POST /v1/allow, Envoy), not for holds.
		it.Priority = ""
		items, which = append(items, it), append(which, p.which[j])
	}
	return res, p, items, which, nil
}

// ReserveInline holds cost of an inline key under limit. A period above
// Options.MaxOwnPeriod is invalid (field "limit.period").
func (s *Server) ReserveInline(ctx context.Context, key string, limit floodgate.Limit, cost int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Status, error) {
	if s.tr != nil {
		return s.reserveInlineTraced(ctx, key, limit, cost, o)
	}
	return s.reserveInline(ctx, key, limit, cost, o)
}

func (s *Server) reserveInline(ctx context.Context, key string, limit floodgate.Limit, cost int64, o *floodgate.ReserveOptions) (*floodgate.Reservation, Status, error) {
	if err := s.checkOwnPeriod("limit.period", ownPeriod(limit)); err != nil {
		return nil, Status{}, err
	}
	if err := checkInlineKey(key); err != nil {
		return nil, Status{}, err
	}
	r, outs, err := s.reserveItems(ctx, []floodgate.Item{{Key: inlineKey(key), Limit: limit, Cost: cost}}, o)
	if outs == nil && err != nil {
		return nil, Status{}, inlineField(err)
	}
	st := Status{Code: OK, Limited: true}
	s.settle("", nil, &st, &outs[0])
	return r, st, nil
}
