package config

import (
	"errors"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// shareBy reads share_by of a rate_limit mapping into r: the key of a
// level of the rule's path (levels) that matches many values, a key-only
// level or a wildcard without share_threshold. The limit, valid, must be
// one a store can share by flows (floodgate.CheckFlow): an aligned
// fixed_window without count_rejected, local_budget, durable or global.
func (p *parser) shareBy(fs map[string]*field, fpath func(string) string, levels []Level, lim floodgate.Limit, r *Rule) {
	f := fs["share_by"]
	if f == nil {
		return
	}
	key, ok := p.str(f.val, fpath("share_by"))
	if !ok {
		return
	}
	i := -1
	for j, l := range levels {
		if l.Key == key {
			i = j
		}
	}
	switch {
	case i < 0:
		keys := make([]string, len(levels))
		for j, l := range levels {
			keys[j] = l.Key
		}
		p.errorf(f.val, fpath("share_by"), "%q is not a key of the descriptor's path (%s): name the level whose values are the flows", key, strings.Join(keys, ", "))
		return
	case levels[i].Value != "" && !levels[i].Wildcard():
		p.errorf(f.val, fpath("share_by"), "the level %s=%s matches one value: share by a key-only or wildcard level, whose values are the flows", key, levels[i].Value)
		return
	case levels[i].ShareThreshold:
		p.errorf(f.val, fpath("share_by"), "the level %s has share_threshold, which counts its values as one: they cannot be flows", key)
		return
	}
	if err := floodgate.CheckFlow(floodgate.Request{Key: "k", Limit: lim}, ""); err != nil {
		msg := err.Error()
		if fe, ok := errors.AsType[*floodgate.FieldError](err); ok {
			msg = fe.Field + ": " + fe.Problem
		}
		p.errorf(f.val, fpath("share_by"), "the limit cannot be shared by flows: %s", msg)
		return
	}
	r.ShareBy, r.shareLevel = key, i
}

// Flow returns the store key and the flow of entries, a request
// descriptor that matched r, a rule with ShareBy: the key is r.Key with
// ShareBy's value left out (so every flow shares one counter), the flow
// is the request's value of ShareBy's level. For a rule without ShareBy,
// r.Key(entries) and "".
func (r *Rule) Flow(entries []Entry) (key, flow string) {
	if r.ShareBy == "" || r.shareLevel >= len(entries) {
		return r.Key(entries), ""
	}
	flow = entries[r.shareLevel].Value
	shared := make([]Entry, len(entries))
	copy(shared, entries)
	shared[r.shareLevel].Value = ""
	return r.Key(shared), flow
}
