package config

import (
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
)

// MaxLimits is the most limits of one rate_limits list or one plan.
const MaxLimits = 16

// rateLimits reads a rate_limits list, Floodgate's extension that puts
// several limits on one descriptor ("10 per second and 10,000 per day"):
// each item is a rate_limit mapping, read by rateLimit; the rule's Limits
// are the items in order, decided all or nothing. An item may not be
// unlimited nor a concurrency limit, two items may not share an algorithm
// and a period (they would share one counter), and the items' failure_mode,
// if given, must agree (the limits of a descriptor are decided together,
// so they fail together). replaces of every item are the rule's. A plan's
// list (plan set) takes neither replaces nor failure_mode, which belong to
// the rule a plan overrides.
func (p *parser) rateLimits(n *yaml.Node, path string, d *Domain, levels []Level) *Rule {
	return p.limitList(n, path, d, levels, false)
}

func (p *parser) limitList(n *yaml.Node, path string, d *Domain, levels []Level, plan bool) *Rule {
	what := "rate_limits"
	if plan {
		what = "a plan"
	}
	switch {
	case isNull(n) || n.Kind == yaml.SequenceNode && len(n.Content) == 0:
		p.errorf(n, path, "%s needs at least one limit (a list of mappings with unit and requests_per_unit)", what)
		return nil
	case n.Kind != yaml.SequenceNode:
		p.errorf(n, path, "want a list of limits (mappings with unit and requests_per_unit), not %s", describe(n))
		return nil
	case len(n.Content) > MaxLimits:
		p.errorf(n, path, "%d limits, more than the %d allowed", len(n.Content), MaxLimits)
		return nil
	}
	before := len(p.errs)
	r := &Rule{Domain: d.Name, Path: levels, File: p.file, ID: ruleID(d.Name, levels)}
	var policyAt int = -1
	for i, item := range n.Content {
		if !p.visit(item) {
			return nil
		}
		item = p.resolve(item)
		ipath := fmt.Sprintf("%s[%d]", path, i)
		if item == nil || item.Kind != yaml.MappingNode {
			p.errorf(item, ipath, "want a limit (a mapping with unit and requests_per_unit), not %s", describe(item))
			continue
		}
		one := p.rateLimit(item, ipath, d, levels)
		if one == nil {
			continue
		}
		lim := one.Limit
		switch {
		case one.Unlimited:
			p.errorf(item, join(ipath, "unlimited"), "an item of %s cannot be unlimited: write rate_limit: {unlimited: true} instead of the list", what)
			continue
		case lim.Algorithm == floodgate.Concurrency:
			p.errorf(item, join(ipath, "algorithm"), "a concurrency limit holds units until released and is acquired alone (POST /v1/leases): give it its own rate_limit, not an item of %s", what)
			continue
		case one.ShareBy != "":
			p.errorf(item, join(ipath, "share_by"), "a limit shared by flows is decided alone: give it its own rate_limit, not an item of %s", what)
			continue
		case plan && len(one.Replaces) > 0:
			p.errorf(item, join(ipath, "replaces"), "a plan takes no replaces: the rule it overrides keeps its own")
			continue
		case plan && one.FailurePolicy != "":
			p.errorf(item, join(ipath, "failure_mode"), "a plan takes no failure_mode: the rule it overrides keeps its own")
			continue
		}
		if j := slices.IndexFunc(r.Limits, func(o floodgate.Limit) bool { return sameCounter(o, lim) }); j >= 0 {
			p.errorf(item, ipath, "same algorithm (%s) and period (%v) as item %d: the two would share one counter; keep the stricter one", lim.EffectiveAlgorithm(), lim.Period, j)
			continue
		}
		if one.FailurePolicy != "" {
			if policyAt >= 0 && r.FailurePolicy != one.FailurePolicy {
				p.errorf(item, join(ipath, "failure_mode"), "failure_mode %s, but item %d says %s: the limits of a descriptor are decided together, so they fail together", one.FailurePolicy, policyAt, r.FailurePolicy)
				continue
			}
			policyAt, r.FailurePolicy = i, one.FailurePolicy
		}
		r.Replaces = append(r.Replaces, one.Replaces...)
		r.Limits = append(r.Limits, lim)
	}
	if len(p.errs) > before || len(r.Limits) == 0 {
		return nil
	}
	r.Limit = r.Limits[0]
	return r
}

// sameCounter reports whether a and b would keep their state in one
// counter of a key: stores keep a key's state by algorithm and period,
// not by the number of requests; a calendar window by its unit, whatever
// its zone and anchor.
func sameCounter(a, b floodgate.Limit) bool {
	return a.EffectiveAlgorithm() == b.EffectiveAlgorithm() && a.Period == b.Period && a.Calendar.Unit == b.Calendar.Unit
}

// CheckLimits reports why limits cannot be the limits of one descriptor
// (an override's, say), naming the index of the limit at fault: none, more
// than MaxLimits, an invalid one, a concurrency limit, or two that share an
// algorithm and a period. Rules of a config pass it by construction.
func CheckLimits(limits []floodgate.Limit) error {
	switch {
	case len(limits) == 0:
		return &floodgate.FieldError{Kind: ErrInvalid, Field: "limits", Problem: "empty: give at least one limit"}
	case len(limits) > MaxLimits:
		return &floodgate.FieldError{Kind: ErrInvalid, Field: "limits", Problem: fmt.Sprintf("%d limits, more than the %d allowed", len(limits), MaxLimits)}
	}
	for i, l := range limits {
		field := fmt.Sprintf("limits[%d]", i)
		if err := l.Validate(); err != nil {
			return &floodgate.FieldError{Kind: ErrInvalid, Field: field, Problem: err.Error()}
		}
		if l.Algorithm == floodgate.Concurrency {
			return &floodgate.FieldError{Kind: ErrInvalid, Field: field + ".algorithm", Problem: "a concurrency limit is acquired alone (POST /v1/leases), never as one of a descriptor's limits"}
		}
		for j := range i {
			if sameCounter(limits[j], l) {
				return &floodgate.FieldError{Kind: ErrInvalid, Field: field, Problem: fmt.Sprintf("same algorithm (%s) and period (%v) as limits[%d]: the two would share one counter", l.EffectiveAlgorithm(), l.Period, j)}
			}
		}
	}
	return nil
}

// ruleNames is the set of rate_limit names of rules, every limit of each.
func ruleNames(rules []*Rule) map[string]bool {
	names := make(map[string]bool)
	for _, r := range rules {
		if r.Limit.Name != "" {
			names[r.Limit.Name] = true
		}
		for _, l := range r.Limits {
			if l.Name != "" {
				names[l.Name] = true
			}
		}
	}
	return names
}

// replacedBy reports whether o's replaces names one of r's limits.
func (r *Rule) replacedBy(o *Rule) bool {
	if len(o.Replaces) == 0 {
		return false
	}
	if r.Limit.Name != "" && slices.Contains(o.Replaces, r.Limit.Name) {
		return true
	}
	for _, l := range r.Limits[min(1, len(r.Limits)):] {
		if l.Name != "" && slices.Contains(o.Replaces, l.Name) {
			return true
		}
	}
	return false
}
