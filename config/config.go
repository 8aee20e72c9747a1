package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/floodgate-rl/floodgate"
)

// Entry is one key/value pair of a request descriptor, as Envoy sends it:
// ("remote_address", "10.0.0.1"). A descriptor is a []Entry, most general
// entry first.
type Entry struct {
	Key   string
	Value string
}

// Level is one level of a rule's path in the config file: the key and value
// of a descriptor entry and of each of its parents.
type Level struct {
	// Key is the descriptor key; it matches a request entry's key exactly.
	Key string
	// Value is "" for a key-only entry, which matches any value (each value
	// counted on its own); a value with "*" is a wildcard, each "*"
	// standing for any text ("foo*" matches every value that starts with
	// "foo", "/api*v1" every value from "/api" to "v1"); any other value
	// matches exactly.
	Value string
	// ValueToMetric (value_to_metric) puts the request's value of this
	// level into MetricKey.
	ValueToMetric bool
	// ShareThreshold (share_threshold) makes every value matching a
	// wildcard Value share one counter, instead of one counter per value.
	ShareThreshold bool
}

// Wildcard reports whether Value is a pattern: "foo*", "/api*v1".
func (l Level) Wildcard() bool { return strings.Contains(l.Value, "*") }

// Rule is a descriptor of the config that has a rate_limit block. Rules are
// made by Parse and never change: share them freely, do not modify them.
type Rule struct {
	// ID names the rule uniquely within a Config and stays the same across
	// reloads while its path does: the domain and the path, escaped as in
	// Key, key-only levels without "=": "messaging|message_type=marketing|to_number".
	ID string
	// Domain is the rule's domain.
	Domain string
	// Path is the rule's descriptor and its parents, outermost first. A
	// request descriptor matches the rule only if it has exactly len(Path)
	// entries.
	Path []Level
	// Limit is the policy, valid, with Name set from rate_limit.name. It is
	// the zero Limit (but for Name) when Unlimited. For a descriptor with
	// rate_limits (several limits), it is the first of them: Limits has
	// them all.
	Limit floodgate.Limit
	// Limits are every limit of the rule, decided all or nothing (a
	// request passes only if each admits it, and then is counted by
	// each): one, Limit, for rate_limit; the list in file order for
	// rate_limits, a Floodgate extension. No two share an algorithm and a
	// period (they would share one counter). Nil when Unlimited.
	Limits []floodgate.Limit
	// Unlimited (rate_limit.unlimited) matches without limiting: the server
	// answers OK without asking the store.
	Unlimited bool
	// ShadowMode (shadow_mode) decides and counts as usual, but the request
	// is always allowed; the server counts the would-be denials.
	ShadowMode bool
	// DetailedMetric (detailed_metric) puts the request's value of every
	// level into MetricKey.
	DetailedMetric bool
	// QuotaMode (quota_mode) makes the rule a quota, as upstream's
	// quota_mode: its descriptor still says OVER_LIMIT when it denies, but
	// the request is denied for its quotas only when every quota of the
	// request denied it (see server.Options.GlobalQuotaMode).
	QuotaMode bool
	// Metadata (metadata) is the descriptor's metadata, a JSON-like tree
	// (map[string]any, []any, string, bool, int64, float64, nil) that the
	// Envoy adapter returns in its response's dynamic metadata when the
	// request passes this rule; nil for none. Shared: do not modify it.
	Metadata map[string]any
	// FailurePolicy (rate_limit.failure_mode) is how to answer when the store
	// fails; empty means the server's default.
	FailurePolicy floodgate.FailurePolicy
	// Replaces (rate_limit.replaces) names the rules this one replaces when
	// both match one request; see Config.MatchAll.
	Replaces []string
	// ShareBy (rate_limit.share_by) is the key of a level of Path whose
	// request value is a flow: the values share one counter, and the
	// limit is split among them by max-min fairness (Rule.Flow,
	// floodgate.Limiter.AllowFlow). Empty for a rule that is not shared.
	ShareBy string
	// shareLevel is the index in Path of ShareBy's level.
	shareLevel int
	// Priority (priority, on the descriptor) is the class a request
	// matching the rule is decided in when it names none
	// (floodgate.Item.Priority); every limit of the rule keeps its
	// reserve. Empty: such a request has no class and may take the whole
	// limit.
	Priority floodgate.Priority
	// Reserves (priority_reserves, on the descriptor) are the reserves
	// the rule's classes are decided under (floodgate.Item.Reserves);
	// nil for the default 5% and 20%. Every limit of the rule keeps them
	// and leaves each class something.
	Reserves *floodgate.Reserves
	// PriorityMax (priority_max, on the descriptor) is the highest class
	// a request may carry in its domain's PriorityKey entry: a higher one
	// is lowered to it. Empty: the rule's Priority, so that a request
	// can lower its class but not raise it (with no Priority either, a
	// request without a class takes the whole limit, and a carried
	// class can only lower it). Never below Priority.
	PriorityMax floodgate.Priority
	// File and Line locate the rule's descriptor in the config.
	File string
	Line int
}

// Domain is the parsed content of one config file: a domain and its
// descriptor tree. It is immutable and safe for concurrent use.
type Domain struct {
	// Name is the domain, the same string that requests carry.
	Name string
	// File and Line locate the domain field.
	File string
	Line int
	// PriorityKey (priority_key, at the top of the file) is the key of
	// a descriptor entry whose value is the request's class (critical,
	// normal or sheddable): the server takes the entry off the
	// descriptor before matching, and decides the matched rule in that
	// class, held to the rule's PriorityMax. Empty: no entry carries a
	// class.
	PriorityKey string

	col   int
	root  level
	rules []*Rule
	// pending: the replaces naming no rate_limit of this file, when
	// parsed for a merge; see parse.
	pending []pendingReplace
	// plans are the domain's plans (plans.go), by name.
	plans map[string]*Plan
}

// Rules returns the domain's rules in file order. The slice is shared: do
// not modify it.
func (d *Domain) Rules() []*Rule { return d.rules }

// Config is a set of domains with distinct names, loaded together by Load or
// LoadDir. It is immutable and safe for concurrent use: a reload builds a new
// Config and swaps the pointer. The zero Config has no domains.
type Config struct {
	domains map[string]*Domain
}

// New gathers domains into a Config. Two domains with the same name are an
// error naming both files, as upstream rejects them; Loader.New with
// MergeDomains merges them instead.
func New(domains ...*Domain) (*Config, error) {
	return Loader{}.New(domains...)
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the domains sorted by name.
func (c *Config) Domains() []*Domain {
	if c == nil {
		return nil
	}
	ds := make([]*Domain, 0, len(c.domains))
	for _, d := range c.domains {
		ds = append(ds, d)
	}
	slices.SortFunc(ds, func(a, b *Domain) int { return cmp.Compare(a.Name, b.Name) })
	return ds
}

// ErrInvalid is wrapped by every *Error.
var ErrInvalid = errors.New("config: invalid")

// Error is one problem of a config file: where it is, and a
// floodgate.FieldError naming the field and the problem, the one field
// error of every edge of Floodgate (the HTTP API and the Envoy protocols
// report theirs the same way). Parse, Load and Validate report every
// problem at once, as an errors.Join of *Error; Errors takes them apart.
type Error struct {
	// File is the file's path, as given to Parse or found by Load.
	File string
	// Line and Column locate the problem, from 1; 0 when the problem is the
	// whole file (it cannot be read, it is empty).
	Line   int
	Column int
	// FieldError holds Field, the path of the field at fault
	// ("descriptors[0].rate_limit.unit"; empty for the whole file), and
	// Problem, what is wrong and, where it can, what to write instead.
	// Its Kind is ErrInvalid.
	floodgate.FieldError
}

// newError is the problem msg of field (empty for the whole file) at
// file:line:column (0 for none).
func newError(file string, line, column int, field, msg string) *Error {
	return &Error{File: file, Line: line, Column: column,
		FieldError: floodgate.FieldError{Kind: ErrInvalid, Field: field, Problem: msg}}
}

// Error formats the problem as "file:line:column: field: problem", the
// form editors and CI logs link to.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}

// Unwrap returns the FieldError, which wraps ErrInvalid, so that both
// errors.Is(err, ErrInvalid) and errors.As(err, **floodgate.FieldError)
// find it.
func (e *Error) Unwrap() error {
	if e.Kind == nil {
		return ErrInvalid
	}
	return &e.FieldError
}

// Errors returns every *Error in err, however joined or wrapped, in order.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		switch x := err.(type) {
		case nil:
		case *Error:
			out = append(out, x)
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(x.Unwrap())
		}
	}
	walk(err)
	return out
}
