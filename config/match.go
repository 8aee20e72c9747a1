package config

import (
	"slices"
	"strings"
)

// level is one level of the descriptor tree, indexed for matching: exact
// key/value pairs in one map; per key, the wildcard values by prefix and the
// key-only entry. Matching a level is one map lookup when the value is
// listed, and otherwise one more, plus one per distinct wildcard prefix
// length of that key, and a scan of the key's patterns with a "*" before
// their end (upstream's middle wildcards, "/api*v1"), usually none; no
// regexp, no allocation.
type level struct {
	exact map[Entry]*node
	byKey map[string]*fallback
	nodes []*node // every node of the level, in file order
}

type fallback struct {
	prefixes map[string]*node // wildcard values with one "*", at the end, by the text before it
	lengths  []int            // the distinct lengths of those prefixes, longest first
	patterns []*node          // the other wildcard values, in file order
	any      *node            // key-only entry
}

// node is one descriptor of the config.
type node struct {
	lv    Level
	rule  *Rule // nil without rate_limit
	next  level
	parts []string // a pattern's value split at each "*"
	// file, line and col locate the descriptor's key, and index is its
	// place in its list, for the errors of a merge (Loader.MergeDomains).
	file             string
	line, col, index int
}

// literal is the number of bytes of a wildcard value that are not "*": the
// more, the more specific the pattern.
func (n *node) literal() int { return len(n.lv.Value) - strings.Count(n.lv.Value, "*") }

// matchParts reports whether value matches a wildcard value split at its
// "*"s (parts), each "*" standing for any text, possibly empty, as
// upstream's wildcardMatch: the first part a prefix, the last a suffix, the
// middle ones in order between them, without overlap.
func matchParts(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// lookup returns the most specific node for e: the exact value, else the
// matching wildcard value with the most text besides its "*"s (for
// values with one "*" at the end, the longest prefix; among equals, the
// value with one "*" at its end, else the first in file order), else the
// key-only entry.
func (l *level) lookup(e Entry) *node {
	if n := l.exact[e]; n != nil {
		return n
	}
	f := l.byKey[e.Key]
	if f == nil {
		return nil
	}
	var best *node
	for _, n := range f.lengths {
		if n <= len(e.Value) {
			if nd := f.prefixes[e.Value[:n]]; nd != nil {
				best = nd
				break
			}
		}
	}
	for _, nd := range f.patterns {
		if (best == nil || nd.literal() > best.literal()) && matchParts(nd.parts, e.Value) {
			best = nd
		}
	}
	if best != nil {
		return best
	}
	return f.any
}

// add inserts n, reporting false if the same key and value are already at
// this level.
func (l *level) add(n *node) bool {
	if !l.index(n) {
		return false
	}
	l.nodes = append(l.nodes, n)
	return true
}

func (l *level) index(n *node) bool {
	switch {
	case n.lv.Value == "":
		f := l.fallback(n.lv.Key)
		if f.any != nil {
			return false
		}
		f.any = n
	case n.lv.Wildcard() && strings.Index(n.lv.Value, "*") < len(n.lv.Value)-1:
		f := l.fallback(n.lv.Key)
		for _, o := range f.patterns {
			if o.lv.Value == n.lv.Value {
				return false
			}
		}
		if n.parts == nil {
			// Set once, when the file is parsed: a merge adds the node to
			// another level, and must not write to a domain in use.
			n.parts = strings.Split(n.lv.Value, "*")
		}
		f.patterns = append(f.patterns, n)
	case n.lv.Wildcard():
		f := l.fallback(n.lv.Key)
		prefix := strings.TrimSuffix(n.lv.Value, "*")
		if f.prefixes[prefix] != nil {
			return false
		}
		if f.prefixes == nil {
			f.prefixes = make(map[string]*node)
		}
		f.prefixes[prefix] = n
		if i, found := slices.BinarySearchFunc(f.lengths, len(prefix), func(a, b int) int { return b - a }); !found {
			f.lengths = slices.Insert(f.lengths, i, len(prefix))
		}
	default:
		e := Entry{n.lv.Key, n.lv.Value}
		if l.exact[e] != nil {
			return false
		}
		if l.exact == nil {
			l.exact = make(map[Entry]*node)
		}
		l.exact[e] = n
	}
	return true
}

func (l *level) fallback(key string) *fallback {
	if l.byKey == nil {
		l.byKey = make(map[string]*fallback)
	}
	f := l.byKey[key]
	if f == nil {
		f = &fallback{}
		l.byKey[key] = f
	}
	return f
}

// Match returns the rule for one request descriptor, or nil if none
// applies. It walks the descriptor tree as envoyproxy/ratelimit does: at
// each level it takes the most specific entry for the request's key and
// value (exact value, else the most specific wildcard, else key-only),
// never backtracking to a less specific one, and the rule applies only if
// the descriptor ends exactly at a descriptor with a rate_limit. It does not
// allocate.
func (d *Domain) Match(entries []Entry) *Rule {
	if d == nil {
		return nil
	}
	lvl := &d.root
	for i, e := range entries {
		n := lvl.lookup(e)
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.rule
		}
		lvl = &n.next
	}
	return nil
}

// Match returns the rule of the named domain for one request descriptor, or
// nil if the domain is unknown or no rule applies. See Domain.Match.
func (c *Config) Match(domain string, entries []Entry) *Rule {
	return c.Domain(domain).Match(entries)
}

// Match is the outcome of one descriptor of a request.
type Match struct {
	// Rule is the matched rule, or nil when none matched.
	Rule *Rule
	// ReplacedBy is set when Rule is named in the replaces of a rule matched
	// by another descriptor of the same request: Rule must then neither be
	// checked nor counted.
	ReplacedBy *Rule
}

// Limited reports whether the descriptor must be checked against the
// store: a rule matched, it is not replaced, and it is not unlimited.
func (m Match) Limited() bool {
	return m.Rule != nil && m.ReplacedBy == nil && !m.Rule.Unlimited
}

// MatchAll matches every descriptor of one request, in order, and applies
// replaces across them: a matched rule whose rate_limit.name is named in the
// replaces of any rule matched by the request is marked ReplacedBy that
// rule. Every matched rule replaces, whether it is itself replaced,
// unlimited or in shadow mode. The result has one Match per descriptor.
func (c *Config) MatchAll(domain string, descriptors [][]Entry) []Match {
	return c.AppendMatchAll(make([]Match, 0, len(descriptors)), domain, descriptors)
}

// AppendMatchAll is MatchAll appending the request's matches to dst, one
// per descriptor, and returning the extended slice: a caller with room in
// dst (an array on its stack) matches without allocating. Replaces apply
// among the appended matches only.
func (c *Config) AppendMatchAll(dst []Match, domain string, descriptors [][]Entry) []Match {
	return c.Domain(domain).AppendMatchAll(dst, descriptors)
}

// AppendMatchAll is Config.AppendMatchAll in d, for a caller that has
// looked the domain up already; a nil d (an unknown domain) matches no
// rule.
func (d *Domain) AppendMatchAll(dst []Match, descriptors [][]Entry) []Match {
	start := len(dst)
	dst = slices.Grow(dst, len(descriptors))
	replacing := false
	for _, entries := range descriptors {
		r := d.Match(entries) // nil for an unknown domain
		dst = append(dst, Match{Rule: r})
		replacing = replacing || (r != nil && len(r.Replaces) > 0)
	}
	if !replacing {
		return dst
	}
	out := dst[start:]
	for i := range out {
		r := out[i].Rule
		if r == nil {
			continue
		}
		for _, o := range out {
			if o.Rule != nil && r.replacedBy(o.Rule) {
				out[i].ReplacedBy = o.Rule
				break
			}
		}
	}
	return dst
}
