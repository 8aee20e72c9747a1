package server

import (
	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
)

// takeClasses returns ds without the entries whose key is dom's
// PriorityKey, and the class each descriptor carried in them (""
// for none). An unknown value carries Sheddable, the lowest class, so
// that a caller who can set the value gains nothing by garbling it, and
// no request is refused for it (Envoy answers an error of its rate limit
// service by letting the request through); of several such entries the
// lowest class counts. A descriptor made of the entry alone keeps it and
// carries nothing. When dom has no PriorityKey, or no descriptor carries
// a class, ds is returned as it is and carried is nil; otherwise ds is
// copied, never modified.
func takeClasses(dom *config.Domain, ds []Descriptor) (out []Descriptor, carried []floodgate.Priority) {
	if dom == nil || dom.PriorityKey == "" {
		return ds, nil
	}
	key := dom.PriorityKey
	out = ds
	for i, d := range ds {
		n := 0
		for _, e := range d.Entries {
			if e.Key == key {
				n++
			}
		}
		if n == 0 || n == len(d.Entries) {
			continue
		}
		if carried == nil {
			out = append([]Descriptor(nil), ds...)
			carried = make([]floodgate.Priority, len(ds))
		}
		kept := make([]config.Entry, 0, len(d.Entries)-n)
		class := floodgate.Critical
		for _, e := range d.Entries {
			if e.Key != key {
				kept = append(kept, e)
				continue
			}
			c, err := floodgate.ParsePriority(e.Value)
			if err != nil {
				c = floodgate.Sheddable
			}
			if config.Rank(c) < config.Rank(class) {
				class = c
			}
		}
		out[i].Entries, carried[i] = kept, class
	}
	return out, carried
}

// carriedAt is the class descriptor i carried, "" for none.
func carriedAt(carried []floodgate.Priority, i int) floodgate.Priority {
	if carried == nil {
		return ""
	}
	return carried[i]
}

// ruleClass is the class a descriptor matching r is decided in when its
// request names none explicitly: the class c it carried, lowered to the
// rule's ceiling (PriorityMax, else its default Priority; with neither,
// no class, which is the whole limit, so that c can only lower it), or
// r's default when it carried none. A carried class on a rule whose
// limits cannot keep its reserve (the config checks them only when the
// rule has priority_max or priority_reserves), or on a rule shared by
// flows, is ignored: r's default applies, never an error.
func ruleClass(r *config.Rule, c floodgate.Priority) floodgate.Priority {
	if c == "" || r.Unlimited || r.ShareBy != "" {
		return r.Priority
	}
	ceiling := r.PriorityMax
	if ceiling == "" {
		ceiling = r.Priority
	}
	if ceiling != "" && config.Rank(c) > config.Rank(ceiling) {
		c = ceiling
	}
	if r.Reserves == nil && r.PriorityMax == "" {
		for _, lim := range r.Limits {
			if _, err := floodgate.ClassLimit(lim, c); err != nil {
				return r.Priority
			}
		}
	}
	return c
}

// ownLimitClass is the class a descriptor with its own limit is decided
// in for the class c it carried: c, or none when the limit cannot keep
// c's reserve.
func ownLimitClass(lim floodgate.Limit, c floodgate.Priority) floodgate.Priority {
	if c == "" {
		return ""
	}
	if _, err := floodgate.ClassLimit(lim, c); err != nil {
		return ""
	}
	return c
}

// overrideClass is the class and reserves of a descriptor whose rule's
// limits an override (or a plan) replaces with limits: c and rs when
// every one of limits keeps c's reserve under rs (nil: the default
// reserves), else no class.
func overrideClass(c floodgate.Priority, rs *floodgate.Reserves, limits []floodgate.Limit) (floodgate.Priority, *floodgate.Reserves) {
	if c == "" {
		return c, rs
	}
	for _, lim := range limits {
		var err error
		if rs == nil {
			_, err = floodgate.ClassLimit(lim, c)
		} else {
			_, err = rs.Limit(lim, c)
		}
		if err != nil {
			return "", nil
		}
	}
	return c, rs
}
