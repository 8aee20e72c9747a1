package config

import (
	"cmp"
	"fmt"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
)

// Plan is a named set of limits of a domain (the plans block of its file,
// a Floodgate extension): what an operator assigns to a key or a tenant
// through the admin API's overrides (docs/plans.md) in place of the
// limits of the rule its descriptor matches. Plans are made by Parse and
// never change.
//
//	plans:
//	  pro:
//	    - {unit: second, requests_per_unit: 100}
//	    - {unit: month, requests_per_unit: 10000}
type Plan struct {
	// Name is the plan's name: letters, digits, '_', '-' and '.', at
	// most 64 bytes.
	Name string
	// Limits are the plan's limits, decided all or nothing as a rule's
	// rate_limits: valid, at most MaxLimits, no concurrency limit, no two
	// of one algorithm and period.
	Limits []floodgate.Limit
	// File and Line locate the plan's name in the config.
	File string
	Line int
}

// Plan returns the named plan of the domain, or nil.
func (d *Domain) Plan(name string) *Plan {
	if d == nil {
		return nil
	}
	return d.plans[name]
}

// Plans returns the domain's plans sorted by name.
func (d *Domain) Plans() []*Plan {
	if d == nil {
		return nil
	}
	out := make([]*Plan, 0, len(d.plans))
	for _, pl := range d.plans {
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b *Plan) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// maxPlanName is the longest plan name.
const maxPlanName = 64

// CheckPlanName reports what is wrong with a plan name, or nil.
func CheckPlanName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty plan name")
	case len(name) > maxPlanName:
		return fmt.Errorf("a plan name of %d bytes, more than %d", len(name), maxPlanName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("plan name %q: only letters, digits, '_', '-' and '.'", name)
		}
	}
	return nil
}

// plans reads a domain's plans block: a mapping of plan names to lists of
// limits.
func (p *parser) plans(n *yaml.Node, path string, d *Domain) {
	switch {
	case isNull(n):
		return
	case n.Kind != yaml.MappingNode:
		p.errorf(n, path, "want a mapping of plan names to lists of limits, not %s", describe(n))
		return
	}
	for _, f := range p.fields(n, path, 0) {
		fpath := join(path, f.name)
		if err := CheckPlanName(f.name); err != nil {
			p.errorf(f.key, fpath, "%v", err)
			continue
		}
		r := p.limitList(f.val, fpath, d, nil, true)
		if r == nil {
			continue
		}
		if d.plans == nil {
			d.plans = make(map[string]*Plan)
		}
		d.plans[f.name] = &Plan{Name: f.name, Limits: r.Limits, File: p.file, Line: f.key.Line}
	}
}

// mergePlans adds the plans of b to m, which has a's; a plan of both is
// an error naming both files.
func mergePlans(m, b *Domain) []error {
	var errs []error
	for _, pl := range b.Plans() {
		if first := m.plans[pl.Name]; first != nil {
			errs = append(errs, newError(pl.File, pl.Line, 0, "plans."+pl.Name,
				fmt.Sprintf("plan %q of domain %q is already defined in %s:%d", pl.Name, m.Name, first.File, first.Line)))
			continue
		}
		if m.plans == nil {
			m.plans = make(map[string]*Plan)
		}
		m.plans[pl.Name] = pl
	}
	return errs
}
