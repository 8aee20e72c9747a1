package config

import (
	"errors"
	"fmt"
)

// Loader gathers and loads config files with options. Its zero value is
// what New, Load, LoadDir and Validate use: upstream's defaults.
type Loader struct {
	// MergeDomains merges the files that define one domain into that
	// domain, as upstream's MERGE_DOMAIN_CONFIG=true does: the top-level
	// descriptors of each later file are added to the domain's, and one
	// with the key and value of a top-level descriptor already there is an
	// error naming both files (nested descriptors belong to their parent,
	// so they cannot meet). A replaces may then name a rate_limit of any
	// of the domain's files. False, the default, makes a domain defined in
	// two files an error.
	MergeDomains bool
}

// New gathers domains into a Config: see the package-level New and
// MergeDomains.
func (ld Loader) New(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	var errs []error
	for _, d := range domains {
		first, ok := c.domains[d.Name]
		switch {
		case !ok:
			c.domains[d.Name] = d
		case ld.MergeDomains:
			m, err := merge(first, d)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			c.domains[d.Name] = m
		default:
			errs = append(errs, newError(d.File, d.Line, d.col, "domain",
				fmt.Sprintf("domain %q is already defined in %s; each domain must be in one file (or merge them: floodgate serve -merge-domain-config, upstream's MERGE_DOMAIN_CONFIG)", d.Name, where(first.File, first.Line))))
		}
	}
	for _, d := range c.domains {
		errs = append(errs, d.unresolvedReplaces()...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Load reads config files into one Config, as the package-level Load.
func (ld Loader) Load(paths ...string) (*Config, error) {
	c, _, err := ld.load(paths)
	return c, err
}

// Validate checks config files without loading them anywhere, as the
// package-level Validate.
func (ld Loader) Validate(paths ...string) error {
	return ld.validate(paths)
}

// merge returns a new domain with the descriptors of a and then b; a and
// b are not changed (their subtrees and rules are shared, never modified).
func merge(a, b *Domain) (*Domain, error) {
	m := &Domain{Name: a.Name, File: a.File, Line: a.Line, col: a.col, PriorityKey: a.PriorityKey}
	for _, n := range a.root.nodes {
		m.root.add(n)
	}
	var errs []error
	if len(a.plans) > 0 {
		m.plans = make(map[string]*Plan, len(a.plans))
		for k, v := range a.plans {
			m.plans[k] = v
		}
	}
	errs = append(errs, mergePlans(m, b)...)
	switch {
	case b.PriorityKey == "" || b.PriorityKey == m.PriorityKey:
	case m.PriorityKey == "":
		m.PriorityKey = b.PriorityKey
	default:
		errs = append(errs, newError(b.File, b.Line, b.col, "priority_key",
			fmt.Sprintf("priority_key %q, but %s of domain %q says %q: merged files name one key", b.PriorityKey, a.File, a.Name, a.PriorityKey)))
	}
	for _, n := range b.root.nodes {
		if m.root.add(n) {
			continue
		}
		what := fmt.Sprintf("key %q with value %q", n.lv.Key, n.lv.Value)
		if n.lv.Value == "" {
			what = fmt.Sprintf("key %q without a value", n.lv.Key)
		}
		first := ""
		for _, o := range m.root.nodes {
			if o.lv.Key == n.lv.Key && o.lv.Value == n.lv.Value {
				first = " (" + where(o.file, o.line) + ")"
				break
			}
		}
		errs = append(errs, newError(b.File, n.line, n.col, fmt.Sprintf("descriptors[%d].key", n.index),
			fmt.Sprintf("duplicate descriptor: %s is already a top-level descriptor of domain %q%s; merged files may not both define it", what, a.Name, first)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m.rules = append(append(make([]*Rule, 0, len(a.rules)+len(b.rules)), a.rules...), b.rules...)
	m.pending = append(append([]pendingReplace(nil), a.pending...), b.pending...)
	return m, nil
}

// unresolvedReplaces reports the replaces of d naming no rate_limit of d,
// once its files are merged. Upstream ignores them; they are almost always
// a typo.
func (d *Domain) unresolvedReplaces() []error {
	if len(d.pending) == 0 {
		return nil
	}
	names := ruleNames(d.rules)
	var errs []error
	for _, pr := range d.pending {
		if !names[pr.name] {
			errs = append(errs, newError(pr.file, pr.line, pr.col, pr.path,
				fmt.Sprintf("replaces %q, but no rate_limit of domain %q has that name", pr.name, d.Name)))
		}
	}
	return errs
}
