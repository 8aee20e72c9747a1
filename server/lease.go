package server

import (
	"context"
	"fmt"

	"github.com/floodgate-rl/floodgate"
)

// Leases: concurrency limits held until released. Acquire holds units of
// the concurrency rules the descriptors of one request match (all or
// nothing) under a lease the caller names; acquiring again under the
// same lease renews it (the limit's Period is the lease's TTL); Release
// gives the units back. The Inline forms do the same for a key and a
// concurrency limit given by the caller.

// Acquire holds units of the concurrency rules that the descriptors of
// one request of domain match, under lease, all or nothing: hits units
// of each (or the descriptor's own hits). A descriptor that matches a
// rule of another algorithm, or that brings its own limit, is invalid; a
// descriptor without a rule holds nothing. Statuses are as Decide's, but
// never quotas.
func (s *Server) Acquire(ctx context.Context, lease, domain string, ds []Descriptor, hits int64) (Result, error) {
	res, p, err := s.planDescriptorLease(domain, ds, hits, lease)
	if err != nil {
		return Result{}, err
	}
	return res, s.acquire(ctx, domain, &res, &p)
}

// AcquireInline holds cost units of an inline key under limit, which
// must be a concurrency limit, under lease. A period above
// Options.MaxOwnPeriod is invalid (field "limit.period").
func (s *Server) AcquireInline(ctx context.Context, lease, key string, limit floodgate.Limit, cost int64) (Status, error) {
	res, p, err := s.planInlineLease(key, limit, cost, lease)
	if err != nil {
		return Status{}, err
	}
	if err := s.acquire(ctx, "", &res, &p); err != nil {
		return Status{}, err
	}
	return res.Statuses[0], nil
}

// Release gives back what Acquire of the same request holds under lease.
// An error is the caller's, or a store failure (the release may not
// have happened, and is safe to repeat).
func (s *Server) Release(ctx context.Context, lease, domain string, ds []Descriptor, hits int64) error {
	_, p, err := s.planDescriptorLease(domain, ds, hits, lease)
	if err != nil {
		return err
	}
	return s.release(ctx, p.items)
}

// ReleaseInline gives back what AcquireInline of the same key and limit
// holds under lease.
func (s *Server) ReleaseInline(ctx context.Context, lease, key string, limit floodgate.Limit, cost int64) error {
	_, p, err := s.planInlineLease(key, limit, cost, lease)
	if err != nil {
		return err
	}
	return s.release(ctx, p.items)
}

// acquire decides the items of p all or nothing, into res.
func (s *Server) acquire(ctx context.Context, domain string, res *Result, p *plan) error {
	if len(p.items) == 0 {
		return nil
	}
	outs, err := s.lim.DecideAll(ctx, p.items)
	if err != nil {
		return p.fieldOf(err)
	}
	s.settleEach(domain, nil, res, p.which, outs)
	return nil
}

// release gives back the units of items; a store failure is an error,
// since the release may not have happened (and is safe to repeat).
func (s *Server) release(ctx context.Context, items []floodgate.Item) error {
	for i := range items {
		items[i].Release = true
	}
	outs, err := s.lim.Decide(ctx, items)
	if err == nil {
		for _, o := range outs {
			if o.Err != nil && o.Policy != floodgate.FailLocal {
				err = o.Err
				break
			}
		}
	}
	return err
}

// planInlineLease is the item of an inline lease: its limit must be a
// concurrency limit.
func (s *Server) planInlineLease(key string, lim floodgate.Limit, cost int64, lease string) (Result, plan, error) {
	if err := s.checkOwnPeriod("limit.period", lim.Period); err != nil {
		return Result{}, plan{}, err
	}
	if lim.Algorithm != floodgate.Concurrency {
		return Result{}, plan{}, Invalid("limit.algorithm", "a lease holds units of a concurrency limit, not %s; decide it with POST /v1/allow", lim.EffectiveAlgorithm())
	}
	if err := checkInlineKey(key); err != nil {
		return Result{}, plan{}, err
	}
	res := Result{Code: OK, Statuses: []Status{{Code: OK, Limited: true, Limit: lim}}}
	p := plan{items: []floodgate.Item{{Key: inlineKey(key), Limit: lim, Cost: cost, Lease: lease}}, which: []int{0}, ownHits: []bool{false}, shadow: []bool{false}}
	return res, p, nil
}

// planDescriptorLease is the items of a lease on a domain's concurrency
// rules.
func (s *Server) planDescriptorLease(domain string, ds []Descriptor, hits int64, lease string) (Result, plan, error) {
	for i, d := range ds {
		if d.Limit != nil {
			return Result{}, plan{}, Invalid(fmt.Sprintf("descriptors[%d].limit", i), "a lease holds units of the config's concurrency rules or of an inline limit, not of a descriptor's own limit")
		}
	}
	if err := checkRequest(domain, ds); err != nil {
		return Result{}, plan{}, err
	}
	return s.planLease(domain, ds, hits, lease)
}
