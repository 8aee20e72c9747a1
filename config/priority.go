package config

import (
	"errors"

	"github.com/floodgate-rl/floodgate"
)

// priority reads a descriptor's priority field (f, nil when absent) into
// r, the descriptor's rule (nil when it has none, or hasLimit and its
// limit is in error): the class a request
// matching the rule is decided in when it names none itself
// (Rule.Priority). The class must be one of floodgate's, the descriptor
// must have a limit, and every limit of the rule must keep the class's
// reserve (floodgate.ClassLimit: gcra, or fixed_window without
// count_rejected, for any class but critical).
func (p *parser) priority(f *field, path string, r *Rule, hasLimit bool) {
	if f == nil {
		return
	}
	fpath := join(path, "priority")
	s, ok := p.str(f.val, fpath)
	if !ok {
		return
	}
	class, err := floodgate.ParsePriority(s)
	if err != nil {
		p.errorf(f.val, fpath, "%q is not a class: give critical, normal or sheddable", s)
		return
	}
	switch {
	case r == nil && hasLimit:
		return // the limit's own error says what is wrong
	case r == nil:
		p.errorf(f.key, fpath, "a priority is the default class of the descriptor's rate_limit, and this descriptor has none")
		return
	case r.Unlimited:
		p.errorf(f.key, fpath, "an unlimited rule has no budget to keep a reserve of")
		return
	case r.ShareBy != "":
		p.errorf(f.key, fpath, "a limit shared by flows (share_by) keeps no reserve for classes")
		return
	}
	for _, lim := range r.Limits {
		if _, err := floodgate.ClassLimit(lim, class); err != nil {
			msg := err.Error()
			if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
				msg = fe.Problem
			}
			p.errorf(f.val, fpath, "the limit cannot keep a reserve for %s requests: %s", class, msg)
			return
		}
	}
	r.Priority = class
}
