package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate-rl/floodgate"
	"go.yaml.in/yaml/v3"
)

// classFields are the fields of priority_reserves.
var classFields = []string{"normal", "sheddable"}

// priorities reads a descriptor's class fields (each nil when absent)
// into r, the descriptor's rule (nil when it has none, or hasLimit and
// its limit is in error):
//   - priority: the class a request matching the rule is decided in
//     when it names none itself (Rule.Priority);
//   - priority_reserves: the reserves of the rule's classes
//     (Rule.Reserves) instead of the default 5% and 20%;
//   - priority_max: the highest class a request may carry in the
//     domain's priority_key entry (Rule.PriorityMax).
//
// Each needs a limit that is not unlimited nor shared by flows; every
// limit of the rule must keep the reserves (floodgate.Reserves.Limit:
// gcra, or fixed_window without count_rejected, for any class but
// critical), leave each class something, and keep at least as much from
// sheddable as from normal requests.
func (p *parser) priorities(prio, reserves, max *field, path string, r *Rule, hasLimit bool) {
	var class, ceiling floodgate.Priority
	var rs *floodgate.Reserves
	okClass, okMax, okRs := true, true, true
	if prio != nil {
		class, okClass = p.class(prio, join(path, "priority"))
	}
	if max != nil {
		ceiling, okMax = p.class(max, join(path, "priority_max"))
	}
	if reserves != nil {
		rs, okRs = p.reserves(reserves, join(path, "priority_reserves"))
	}
	if !okClass || !okMax || !okRs {
		return
	}
	// The first field given names what is wrong with the rule.
	var first *field
	var fname string
	for _, f := range []struct {
		f    *field
		name string
	}{{prio, "priority"}, {reserves, "priority_reserves"}, {max, "priority_max"}} {
		if f.f != nil {
			first, fname = f.f, f.name
			break
		}
	}
	if first == nil {
		return
	}
	fpath := join(path, fname)
	switch {
	case r == nil && hasLimit:
		return // the limit's own error says what is wrong
	case r == nil:
		p.errorf(first.key, fpath, "a %s is for the descriptor's rate_limit, and this descriptor has none", fname)
		return
	case r.Unlimited:
		p.errorf(first.key, fpath, "an unlimited rule has no budget to keep a reserve of")
		return
	case r.ShareBy != "":
		p.errorf(first.key, fpath, "a limit shared by flows (share_by) keeps no reserve for classes")
		return
	}
	if class != "" && ceiling != "" && Rank(ceiling) < Rank(class) {
		p.errorf(max.val, join(path, "priority_max"), "%s is below the rule's default class %s (priority): a request could not carry the class it gets without one", ceiling, class)
		return
	}
	use := floodgate.Reserves{Normal: floodgate.ClassReserve{Percent: 5}, Sheddable: floodgate.ClassReserve{Percent: 20}}
	if rs != nil {
		use = *rs
	}
	for j, lim := range r.Limits {
		which := "the limit"
		if len(r.Limits) > 1 {
			which = fmt.Sprintf("rate_limits[%d] (%s)", j, lim)
		}
		// The classes the rule may decide: its default, and every class
		// a request may carry (which may always be lower).
		check := []floodgate.Priority{class}
		if rs != nil || ceiling != "" {
			check = []floodgate.Priority{floodgate.Normal, floodgate.Sheddable}
		}
		for _, c := range check {
			if c == "" {
				continue
			}
			_, err := use.Limit(lim, c)
			if err == nil {
				continue
			}
			msg := err.Error()
			fe, isField := errors.AsType[*floodgate.FieldError](err)
			if isField {
				msg = fe.Problem
			}
			switch {
			case isField && fe.Field == "reserves.sheddable" && rs != nil:
				p.errorf(p.reserveNode(reserves, "sheddable"), join(path, "priority_reserves.sheddable"), "%s: for %s, %s", rs.Sheddable, which, msg)
			case prio != nil && c == class:
				p.errorf(prio.val, join(path, "priority"), "%s cannot keep a reserve for %s requests: %s", which, c, msg)
			default:
				p.errorf(first.val, fpath, "%s cannot keep a reserve for %s requests: %s", which, c, msg)
			}
			return
		}
		if rs == nil {
			continue
		}
		capacity := lim.Capacity()
		for _, c := range []struct {
			name string
			r    floodgate.ClassReserve
		}{{"normal", rs.Normal}, {"sheddable", rs.Sheddable}} {
			if kept := c.r.Kept(capacity); kept > 0 && kept >= capacity {
				p.errorf(p.reserveNode(reserves, c.name), join(path, "priority_reserves."+c.name), "%s keeps %d units, the whole capacity %d of %s: %s requests would never be admitted", c.r, kept, capacity, which, c.name)
				return
			}
		}
	}
	r.Priority, r.Reserves, r.PriorityMax = class, rs, ceiling
}

// class reads a class name.
func (p *parser) class(f *field, fpath string) (floodgate.Priority, bool) {
	s, ok := p.str(f.val, fpath)
	if !ok {
		return "", false
	}
	class, err := floodgate.ParsePriority(s)
	if err != nil {
		p.errorf(f.val, fpath, "%q is not a class: give critical, normal or sheddable", s)
		return "", false
	}
	return class, true
}

// reserves reads priority_reserves: a mapping of normal and sheddable
// to a percent ("10%") or a number of units (10). A class left out keeps
// nothing; critical has no reserve by definition.
func (p *parser) reserves(f *field, fpath string) (*floodgate.Reserves, bool) {
	if f.val.Kind != yaml.MappingNode {
		p.errorf(f.val, fpath, "want a mapping of normal and sheddable to a percent (10%%) or units (10), not %s", describe(f.val))
		return nil, false
	}
	rs := &floodgate.Reserves{}
	ok := true
	for _, c := range p.fields(f.val, fpath, 0) {
		cpath := join(fpath, c.name)
		var dst *floodgate.ClassReserve
		switch c.name {
		case "normal":
			dst = &rs.Normal
		case "sheddable":
			dst = &rs.Sheddable
		case "critical":
			p.errorf(c.key, cpath, "critical takes the whole budget by definition and has no reserve (to keep units from every class, lower the limit)")
			ok = false
			continue
		default:
			p.unknown(c, fpath, "priority_reserves", classFields)
			ok = false
			continue
		}
		r, good := p.reserve(c.val, cpath)
		if !good {
			ok = false
			continue
		}
		*dst = r
	}
	if !ok {
		return nil, false
	}
	if err := rs.Validate(); err != nil {
		// Reserve's own checks are done by reserve; this is a guard.
		p.errorf(f.val, fpath, "%v", err)
		return nil, false
	}
	return rs, true
}

// reserve reads one class's reserve: "N%" (a whole percent, 0 to 100)
// or N units (an integer, 0 or more).
func (p *parser) reserve(n *yaml.Node, path string) (floodgate.ClassReserve, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, path, "want a percent (10%%) or units (10), not %s", describe(n))
		return floodgate.ClassReserve{}, false
	}
	if pct, isPct := strings.CutSuffix(n.Value, "%"); isPct {
		v, err := strconv.ParseInt(strings.TrimSpace(pct), 10, 64)
		switch {
		case err != nil:
			p.errorf(n, path, "%q is not a whole percent (10%%)", n.Value)
		case v < 0:
			p.errorf(n, path, "%s: a reserve cannot be negative", n.Value)
		case v > 100:
			p.errorf(n, path, "%s is more than the whole capacity", n.Value)
		default:
			return floodgate.ClassReserve{Percent: v}, true
		}
		return floodgate.ClassReserve{}, false
	}
	if n.ShortTag() != "!!int" {
		p.errorf(n, path, "want a percent (10%%) or units (10), not %s", describe(n))
		return floodgate.ClassReserve{}, false
	}
	v, ok := p.integer(n, path)
	if !ok {
		return floodgate.ClassReserve{}, false
	}
	if v < 0 {
		p.errorf(n, path, "%d: a reserve cannot be negative", v)
		return floodgate.ClassReserve{}, false
	}
	return floodgate.ClassReserve{Units: v}, true
}

// reserveNode is the node of class's reserve in priority_reserves, or
// the mapping when the class is left out.
func (p *parser) reserveNode(f *field, class string) *yaml.Node {
	n := f.val
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := p.resolve(n.Content[i]); k != nil && k.Value == class {
			if v := p.resolve(n.Content[i+1]); v != nil {
				return v
			}
		}
	}
	return f.key
}

// Rank orders the priority classes, for comparing them: sheddable 0,
// normal 1, critical 2; no class (the whole limit) ranks as critical.
func Rank(c floodgate.Priority) int {
	switch c {
	case floodgate.Sheddable:
		return 0
	case floodgate.Normal:
		return 1
	}
	return 2
}
