package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-rl/floodgate"
)

// MaxFileSize is the largest config file Parse and Load accept: 16 MiB,
// some hundred thousand descriptors.
const MaxFileSize = 16 << 20

// Bounds that keep a hostile file from exhausting the stack or memory.
const (
	maxDepth      = 64      // nested descriptor levels
	maxMergeDepth = 16      // nested "<<" merge keys
	nodesPerByte  = 4       // YAML nodes visited per byte of the file; see visit
	extraNodes    = 1 << 16 // and beyond that
	maxNodes      = 1 << 21 // and never more
	maxErrors     = 1000    // problems reported per file
	maxFieldLen   = 200     // longer field paths are cut in the middle
	maxMsgLen     = 500     // longer messages (quoting long user text) are cut
)

// The fields of each mapping, in the order of the docs.
var (
	rootFields       = []string{"domain", "descriptors", "plans", "priority_key"}
	descriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "quota_mode", "metadata", "priority", "priority_reserves", "priority_max"}
	rateLimitFields  = []string{"unit", "requests_per_unit", "name", "unlimited", "replaces",
		"algorithm", "burst", "period", "window", "count_rejected", "local_budget", "failure_mode", "durable", "global", "share_by",
		"time_zone", "anchor"}
	replacesFields = []string{"name"}
)

// Parse reads one config file: one domain and its descriptors, in
// envoyproxy/ratelimit's format with Floodgate's extensions (see the package
// doc). file names the file in errors. On any problem it returns nil and
// every problem at once, each an *Error with line, column and field. It
// never panics, whatever data holds.
func Parse(file string, data []byte) (*Domain, error) {
	return parse(file, data, false)
}

// parse is Parse; with deferReplaces, a replaces naming no rate_limit of
// the file is left for Loader.New to check once the domain's files are
// merged.
func parse(file string, data []byte, deferReplaces bool) (*Domain, error) {
	p := &parser{file: file, budget: min(nodesPerByte*len(data)+extraNodes, maxNodes), deferReplaces: deferReplaces}
	d := p.parse(data)
	if err := p.err(); err != nil {
		return nil, err
	}
	return d, nil
}

type parser struct {
	file     string
	errs     []*Error
	budget   int    // YAML nodes left to visit
	stop     bool   // too many nodes or problems: the walk ends
	stopped  *Error // why, reported after the others
	replaces []pendingReplace
	// deferReplaces: see parse.
	deferReplaces bool
}

// pendingReplace is a replaces entry, checked once every name is known.
type pendingReplace struct {
	name, path string
	file       string
	line, col  int
}

// field is one key/value pair of a mapping, aliases resolved.
type field struct {
	name string
	key  *yaml.Node
	val  *yaml.Node
}

func (p *parser) parse(data []byte) *Domain {
	if len(data) > MaxFileSize {
		p.errs = append(p.errs, newError(p.file, 0, 0, "", fmt.Sprintf("%d bytes is above the maximum %d", len(data), MaxFileSize)))
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errs = append(p.errs, newError(p.file, 0, 0, "", "empty file: want a domain and its descriptors"))
		} else {
			p.yamlError(err)
		}
		return nil
	}
	for {
		// Empty documents (a trailing "---") are harmless; any other is not.
		var extra yaml.Node
		err := decode(dec, &extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.yamlError(err)
			return nil
		}
		if !isNull(docContent(&extra)) {
			p.errorf(&extra, "", "a second YAML document (after ---): put each domain in a file of its own")
			return nil
		}
	}
	return p.domain(p.resolve(docContent(&doc)))
}

// domain reads the top of a config file, decoded or built by FromSpec: a
// mapping with domain and descriptors.
func (p *parser) domain(root *yaml.Node) *Domain {
	if isNull(root) {
		p.errs = append(p.errs, newError(p.file, 0, 0, "", "empty file: want a domain and its descriptors"))
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root, "", "want a mapping with domain and descriptors, not %s", describe(root))
		return nil
	}
	var (
		domain      *field
		descriptors *yaml.Node
		plans       *field
		prioKey     *field
	)
	for _, f := range p.fields(root, "", 0) {
		switch f.name {
		case "domain":
			domain = &f
		case "descriptors":
			descriptors = f.val
		case "plans":
			plans = &f
		case "priority_key":
			prioKey = &f
		default:
			p.unknown(f, "", "the top level", rootFields)
		}
	}
	d := &Domain{File: p.file}
	switch {
	case domain == nil:
		p.errorf(root, "domain", "missing domain: every config file names its domain")
	default:
		d.Line, d.col = domain.key.Line, domain.key.Column
		if name, ok := p.str(domain.val, "domain"); ok && name == "" {
			p.errorf(domain.val, "domain", "empty domain")
		} else {
			d.Name = name
		}
	}
	if prioKey != nil {
		if k, ok := p.str(prioKey.val, "priority_key"); ok {
			if k == "" {
				p.errorf(prioKey.val, "priority_key", "empty: name the descriptor key whose value is a request's class, or leave priority_key out")
			}
			d.PriorityKey = k
		}
	}
	if descriptors != nil {
		p.descriptors(descriptors, "descriptors", &d.root, nil, d, 1)
	}
	if plans != nil {
		p.plans(plans.val, "plans", d)
	}
	p.checkReplaces(d)
	return d
}

// decode runs the YAML parser. go-yaml turns its own failures into errors;
// the recover only keeps a bug in it from taking the server down with it,
// since Parse promises never to panic on any input.
func decode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: the parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

func docContent(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil
		}
		return doc.Content[0]
	}
	return doc
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// yamlError converts a syntax error of go-yaml ("yaml: line 3: did not find
// expected key") into an *Error with the line.
//
// go-yaml numbers the lines of its parser errors from 0 (it reports the raw
// mark of the construct being parsed, or of the problem, and adds 1 only for
// scanner errors), and leaves line 0 out: for those messages the line is
// one more than it says, the line where the construct that failed begins.
func (p *parser) yamlError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := newError(p.file, 0, 0, "", msg)
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil && line > 0 {
				e.Line, e.Problem = line, after
			}
		}
	}
	if isParserProblem(e.Problem) {
		e.Line++
	}
	p.errs = append(p.errs, e)
}

// isParserProblem reports whether msg is one of go-yaml's parser errors
// (parserc.go), as opposed to its scanner errors.
func isParserProblem(msg string) bool {
	return strings.HasPrefix(msg, "did not find expected ") ||
		strings.HasPrefix(msg, "found duplicate %") ||
		msg == "found incompatible YAML document" ||
		msg == "found undefined tag handle"
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.halt(n, fmt.Sprintf("more than %d problems; stopped here", maxErrors))
		return
	}
	e := newError(p.file, 0, 0, cut(field, maxFieldLen), cut(fmt.Sprintf(format, args...), maxMsgLen))
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	p.errs = append(p.errs, e)
}

// cut shortens s to about n bytes by dropping its middle, at rune
// boundaries.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head, tail := n/2, len(s)-n/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + "…" + s[tail:]
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// err returns the problems sorted by position, without repeats (an alias
// used twice repeats the problems of its anchor).
func (p *parser) err() error {
	if len(p.errs) == 0 && p.stopped == nil {
		return nil
	}
	slices.SortStableFunc(p.errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	errs := make([]error, 0, len(p.errs))
	seen := make(map[Error]bool, len(p.errs))
	for _, e := range p.errs {
		if !seen[*e] {
			seen[*e] = true
			errs = append(errs, e)
		}
	}
	if p.stopped != nil {
		errs = append(errs, p.stopped)
	}
	return errors.Join(errs...)
}

// visit counts a node against the budget. Without aliases a file cannot
// hold more mappings and list items than bytes; subtrees reused through
// aliases may expand it to four nodes per byte and some (a 16 MiB file of
// plain descriptors is about a million). The budget only stops aliases of
// aliases (the "billion laughs"), which would otherwise make the walk
// endless, and keeps a small hostile file cheap: 2.5 KB cannot cost more
// than some 75,000 nodes. It reports false, once with an error, when the
// budget is spent or too many problems were found.
func (p *parser) visit(n *yaml.Node) bool {
	if p.stop {
		return false
	}
	p.budget--
	if p.budget < 0 {
		p.halt(n, "aliases expand the file to too many YAML nodes (aliases of aliases?); stopped here")
		return false
	}
	return true
}

// halt ends the walk, noting why and where.
func (p *parser) halt(n *yaml.Node, msg string) {
	if !p.stop {
		p.stop = true
		p.stopped = newError(p.file, line(n), 0, "", msg)
	}
}

// resolve follows an alias to its anchored node.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// fields returns the pairs of mapping n, aliases resolved and "<<" merge
// keys applied as YAML 1.1 (and upstream's yaml.v2) define them: a key
// given in the mapping wins over a merged one, an earlier merged mapping
// over a later one. A key given twice is an error.
func (p *parser) fields(n *yaml.Node, path string, depth int) []field {
	if !p.visit(n) {
		return nil
	}
	var (
		out    []field
		seen   = make(map[string]int, len(n.Content)/2)
		merges []*yaml.Node
	)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.resolve(n.Content[i]), p.resolve(n.Content[i+1])
		if k == nil || v == nil {
			p.errorf(n.Content[i], path, "an alias that leads nowhere")
			continue
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k, path, "a key must be a string, not %s", describe(k))
			continue
		}
		if j, dup := seen[k.Value]; dup {
			p.errorf(k, join(path, k.Value), "given twice (first at line %d)", out[j].key.Line)
			continue
		}
		seen[k.Value] = len(out)
		out = append(out, field{k.Value, k, v})
	}
	for _, m := range merges {
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, s := range sources {
			s = p.resolve(s)
			switch {
			case s == nil || s.Kind != yaml.MappingNode:
				p.errorf(m, path, "<< merges a mapping or a list of mappings, not %s", describe(s))
				continue
			case depth >= maxMergeDepth:
				p.errorf(m, path, "<< merges nested deeper than %d (does an anchor merge itself?)", maxMergeDepth)
				continue
			}
			for _, f := range p.fields(s, path, depth+1) {
				if _, ok := seen[f.name]; !ok {
					seen[f.name] = len(out)
					out = append(out, f)
				}
			}
		}
	}
	return out
}

func (p *parser) descriptors(n *yaml.Node, path string, lvl *level, parents []Level, d *Domain, depth int) {
	switch {
	case isNull(n):
		return
	case n.Kind != yaml.SequenceNode:
		p.errorf(n, path, "want a list of descriptors, not %s", describe(n))
		return
	case depth > maxDepth:
		p.errorf(n, path, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for i, item := range n.Content {
		if !p.visit(item) {
			return
		}
		p.descriptor(p.resolve(item), fmt.Sprintf("%s[%d]", path, i), lvl, parents, d, depth)
	}
}

func (p *parser) descriptor(n *yaml.Node, path string, lvl *level, parents []Level, d *Domain, depth int) {
	if n == nil || n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a descriptor (a mapping with key and optionally value, rate_limit, descriptors), not %s", describe(n))
		return
	}
	var (
		key, value, rateLimit, children *field
		rateLimits                      *field
		lv                              Level
		shadow, detailed, quota         bool
		share, prio, prioRs, prioMax    *field
		metadata                        map[string]any
	)
	for _, f := range p.fields(n, path, 0) {
		switch f.name {
		case "key":
			key = &f
		case "value":
			value = &f
		case "rate_limit":
			rateLimit = &f
		case "rate_limits":
			rateLimits = &f
		case "descriptors":
			children = &f
		case "shadow_mode":
			shadow, _ = p.boolean(f.val, join(path, f.name))
		case "detailed_metric":
			detailed, _ = p.boolean(f.val, join(path, f.name))
		case "value_to_metric":
			lv.ValueToMetric, _ = p.boolean(f.val, join(path, f.name))
		case "share_threshold":
			lv.ShareThreshold, _ = p.boolean(f.val, join(path, f.name))
			share = &f
		case "quota_mode":
			quota, _ = p.boolean(f.val, join(path, f.name))
		case "metadata":
			metadata = p.metadata(f.val, join(path, f.name))
		case "priority":
			prio = &f
		case "priority_reserves":
			prioRs = &f
		case "priority_max":
			prioMax = &f
		default:
			p.unknown(f, path, "a descriptor", descriptorFields)
		}
	}
	if key == nil {
		p.errorf(n, join(path, "key"), "missing key: every descriptor needs one")
	} else if k, ok := p.str(key.val, join(path, "key")); ok {
		if k == "" {
			p.errorf(key.val, join(path, "key"), "empty key")
		}
		lv.Key = k
	}
	if value != nil {
		lv.Value, _ = p.str(value.val, join(path, "value"))
	}
	if lv.ShareThreshold && !lv.Wildcard() {
		// As upstream, which refuses it: without a wildcard there is
		// nothing to share.
		p.errorf(share.key, join(path, "share_threshold"), "share_threshold needs a wildcard value (one with \"*\") to share; this descriptor's value is %q", lv.Value)
	}
	nd := &node{lv: lv, file: p.file, line: n.Line, col: n.Column, index: len(lvl.nodes)}
	if key != nil {
		nd.line, nd.col = key.key.Line, key.key.Column
	}
	if lv.Key != "" && !lvl.add(nd) {
		what := fmt.Sprintf("key %q with value %q", lv.Key, lv.Value)
		if lv.Value == "" {
			what = fmt.Sprintf("key %q without a value", lv.Key)
		}
		p.errorf(key.key, join(path, "key"), "duplicate descriptor: %s is already at this level", what)
	}
	levels := append(slices.Clip(parents), lv)
	if rateLimit != nil && rateLimits != nil {
		p.errorf(rateLimits.key, join(path, "rate_limits"), "give rate_limit or rate_limits, not both (put the rate_limit into the list)")
		rateLimit = nil
	}
	if rateLimits != nil {
		if r := p.rateLimits(rateLimits.val, join(path, "rate_limits"), d, levels); r != nil {
			r.ShadowMode, r.DetailedMetric, r.Line = shadow, detailed, n.Line
			r.QuotaMode, r.Metadata = quota, metadata
			nd.rule = r
			d.rules = append(d.rules, r)
		}
	}
	if rateLimit != nil {
		if r := p.rateLimit(rateLimit.val, join(path, "rate_limit"), d, levels); r != nil {
			r.ShadowMode, r.DetailedMetric, r.Line = shadow, detailed, n.Line
			r.QuotaMode, r.Metadata = quota, metadata
			nd.rule = r
			d.rules = append(d.rules, r)
		}
	}
	p.priorities(prio, prioRs, prioMax, path, nd.rule, rateLimit != nil || rateLimits != nil)
	if children != nil {
		p.descriptors(children.val, join(path, "descriptors"), &nd.next, levels, d, depth+1)
	}
}

// rateLimit reads a rate_limit block. A null block ("rate_limit:" and
// nothing) is no limit, as upstream reads it.
func (p *parser) rateLimit(n *yaml.Node, path string, d *Domain, levels []Level) *Rule {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping with unit and requests_per_unit, not %s", describe(n))
		return nil
	}
	before := len(p.errs)
	fs := make(map[string]*field)
	for _, f := range p.fields(n, path, 0) {
		if slices.Contains(rateLimitFields, f.name) {
			fs[f.name] = &f
		} else {
			p.unknown(f, path, "rate_limit", rateLimitFields)
		}
	}
	r := &Rule{Domain: d.Name, Path: levels, File: p.file, ID: ruleID(d.Name, levels)}
	var lim floodgate.Limit
	fpath := func(name string) string { return join(path, name) }
	if f := fs["name"]; f != nil {
		lim.Name, _ = p.str(f.val, fpath("name"))
	}
	if f := fs["unlimited"]; f != nil {
		r.Unlimited, _ = p.boolean(f.val, fpath("unlimited"))
	}
	if f := fs["replaces"]; f != nil {
		r.Replaces = p.replacesList(f.val, fpath("replaces"), lim.Name)
	}
	if r.Unlimited {
		// requests_per_unit is allowed and ignored, as upstream does.
		for _, name := range []string{"unit", "period", "algorithm", "burst", "window", "count_rejected", "local_budget", "failure_mode", "durable", "global", "share_by", "time_zone", "anchor"} {
			if f := fs[name]; f != nil {
				p.errorf(f.key, fpath(name), "an unlimited rate limit takes no %s", name)
			}
		}
		r.Limit = floodgate.Limit{Name: lim.Name}
		return r
	}
	lim.Period = p.period(n, fs, fpath)
	lim.Limit = p.requestsPerUnit(n, fs, fpath)
	p.extensions(fs, fpath, &lim, r)
	p.calendar(fs, fpath, &lim)
	// The fields found bad so far; Validate's findings about them would only
	// repeat those problems.
	bad := make(map[string]bool)
	for _, e := range p.errs[before:] {
		name := strings.TrimPrefix(e.Field, path+".")
		name, _, _ = strings.Cut(name, ".")
		name, _, _ = strings.Cut(name, "[")
		bad[name] = true
	}
	if err := lim.Validate(); err != nil {
		p.limitErrors(err, n, path, fs, bad)
	}
	if len(p.errs) == before {
		p.shareBy(fs, fpath, levels, lim, r)
	}
	if len(p.errs) > before {
		return nil
	}
	r.Limit, r.Limits = lim, []floodgate.Limit{lim}
	return r
}

// period reads unit (one of upstream's) or period (a Go duration, the
// extension) of a rate_limit mapping n; 0 after reporting a problem.
func (p *parser) period(n *yaml.Node, fs map[string]*field, fpath func(string) string) (length time.Duration) {
	unit, per := fs["unit"], fs["period"]
	switch {
	case unit != nil && per != nil:
		p.errorf(per.key, fpath("period"), "give unit or period, not both")
	case unit != nil:
		if s, ok := p.str(unit.val, fpath("unit")); ok {
			if d, ok := UnitLength(s); ok {
				length = d
			} else {
				p.errorf(unit.val, fpath("unit"), "unknown unit %q (want %s; or a period such as 90s)", s, unitList)
			}
		}
	case per != nil:
		if s, ok := p.str(per.val, fpath("period")); ok {
			if d, err := time.ParseDuration(s); err == nil {
				length = d
			} else {
				p.errorf(per.val, fpath("period"), "%q is not a duration such as 90s, 1m30s or 36h", s)
			}
		}
	default:
		p.errorf(n, fpath("unit"), "missing unit (want %s; or a period such as 90s)", unitList)
	}
	return length
}

// requestsPerUnit reads requests_per_unit of a rate_limit mapping n; 0
// after reporting a problem.
func (p *parser) requestsPerUnit(n *yaml.Node, fs map[string]*field, fpath func(string) string) int64 {
	if f := fs["requests_per_unit"]; f == nil {
		p.errorf(n, fpath("requests_per_unit"), "missing requests_per_unit (0 denies every request)")
	} else if v, ok := p.integer(f.val, fpath("requests_per_unit")); ok {
		switch {
		case v < 0:
			p.errorf(f.val, fpath("requests_per_unit"), "%d is negative", v)
		case v > math.MaxUint32:
			p.errorf(f.val, fpath("requests_per_unit"), "%d is above %d, the most Envoy's rate limit protocol can carry", v, uint32(math.MaxUint32))
		default:
			return v
		}
	}
	return 0
}

// extensions reads Floodgate's fields of a rate_limit mapping into lim and
// r: algorithm, burst, window, count_rejected, local_budget,
// failure_mode, durable and global.
func (p *parser) extensions(fs map[string]*field, fpath func(string) string, lim *floodgate.Limit, r *Rule) {
	if f := fs["algorithm"]; f != nil {
		s, _ := p.str(f.val, fpath("algorithm"))
		lim.Algorithm = floodgate.Algorithm(s)
	}
	if f := fs["burst"]; f != nil {
		lim.Burst, _ = p.integer(f.val, fpath("burst"))
	}
	if f := fs["window"]; f != nil {
		s, _ := p.str(f.val, fpath("window"))
		lim.Window = floodgate.Window(s)
	}
	if f := fs["count_rejected"]; f != nil {
		lim.CountRejected, _ = p.boolean(f.val, fpath("count_rejected"))
	}
	if f := fs["local_budget"]; f != nil {
		lim.LocalBudget, _ = p.integer(f.val, fpath("local_budget"))
	}
	if f := fs["durable"]; f != nil {
		lim.Durable, _ = p.boolean(f.val, fpath("durable"))
	}
	if f := fs["global"]; f != nil {
		lim.Global, _ = p.boolean(f.val, fpath("global"))
	}
	if f := fs["failure_mode"]; f != nil {
		if s, ok := p.str(f.val, fpath("failure_mode")); ok {
			switch m := floodgate.FailurePolicy(s); m {
			case floodgate.FailOpen, floodgate.FailClosed, floodgate.FailLocal:
				r.FailurePolicy = m
			default:
				p.errorf(f.val, fpath("failure_mode"), "unknown failure mode %q (want fail_open, fail_closed or local)", s)
			}
		}
	}
}

// limitErrors reports the problems found by floodgate.Limit.Validate, each
// at the YAML field it is about, leaving out those that follow from a field
// already reported bad.
func (p *parser) limitErrors(err error, n *yaml.Node, path string, fs map[string]*field, bad map[string]bool) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	type problem struct{ name, msg string }
	var problems []problem
	for _, e := range errs {
		pr := problem{"", e.Error()}
		if fe, ok := errors.AsType[*floodgate.FieldError](e); ok {
			pr = problem{fe.Field, fe.Problem}
		}
		problems = append(problems, pr)
		if pr.name == "algorithm" {
			// An unknown algorithm makes every check that depends on the
			// algorithm say "<unknown> takes no burst" and the like.
			bad["burst"], bad["window"], bad["count_rejected"], bad["local_budget"], bad["durable"] = true, true, true, true, true
		}
	}
	for _, pr := range problems {
		// The names of floodgate.Limit's fields in YAML; the first that is
		// given locates the problem.
		candidates := map[string][]string{
			"algorithm":      {"algorithm"},
			"limit":          {"requests_per_unit"},
			"period":         {"period", "unit"},
			"burst":          {"burst", "requests_per_unit"},
			"window":         {"window"},
			"count_rejected": {"count_rejected"},
			"local_budget":   {"local_budget"},
			"durable":        {"durable"},
			"global":         {"global"},
			"calendar":       {"anchor", "time_zone", "unit"},
		}[pr.name]
		at, field, located := n, path, ""
		for _, c := range candidates {
			if f := fs[c]; f != nil {
				at, field, located = f.val, join(path, c), c
				break
			}
		}
		if bad[located] || bad[pr.name] || pr.name == "period" && (bad["unit"] || bad["period"]) {
			continue
		}
		p.errorf(at, field, "%s", pr.msg)
	}
}

func (p *parser) replacesList(n *yaml.Node, path, own string) []string {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of {name: ...}, not %s", describe(n))
		return nil
	}
	var names []string
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		item = p.resolve(item)
		if item == nil || item.Kind != yaml.MappingNode {
			p.errorf(item, ipath, "want {name: ...}, not %s", describe(item))
			continue
		}
		var name *field
		for _, f := range p.fields(item, ipath, 0) {
			if f.name == "name" {
				name = &f
			} else {
				p.unknown(f, ipath, "a replaces entry", replacesFields)
			}
		}
		if name == nil {
			p.errorf(item, join(ipath, "name"), "missing name of the rate limit to replace")
			continue
		}
		s, ok := p.str(name.val, join(ipath, "name"))
		switch {
		case !ok:
		case s == "":
			p.errorf(name.val, join(ipath, "name"), "empty name")
		case s == own:
			p.errorf(name.val, join(ipath, "name"), "a rate limit cannot replace itself (%q)", s)
		default:
			names = append(names, s)
			p.replaces = append(p.replaces, pendingReplace{name: s, path: join(ipath, "name"), file: p.file, line: name.val.Line, col: name.val.Column})
		}
	}
	return names
}

// checkReplaces reports replaces naming no rate limit of the domain.
// Upstream ignores them; they are almost always a typo.
func (p *parser) checkReplaces(d *Domain) {
	names := ruleNames(d.rules)
	for _, pr := range p.replaces {
		switch {
		case names[pr.name]:
		case p.deferReplaces:
			d.pending = append(d.pending, pr)
		default:
			p.errorf(&yaml.Node{Line: pr.line, Column: pr.col}, pr.path, "replaces %q, but no rate_limit of domain %q has that name", pr.name, d.Name)
		}
	}
}

// str reads a string. Any scalar is read as its text, as upstream reads
// "value: 123" or "value: 50.0.0.5"; null is "".
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	switch {
	case isNull(n):
		return "", true
	case n.Kind != yaml.ScalarNode:
		p.errorf(n, path, "want a string, not %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// yamlBools are the booleans of YAML 1.1, which upstream's yaml.v2 reads.
var yamlBools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"true": true, "True": true, "TRUE": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false,
	"false": false, "False": false, "FALSE": false, "off": false, "Off": false, "OFF": false,
}

// boolean reads a boolean: true, false or another YAML 1.1 spelling (yes,
// no, on, off), unquoted. Null is false, as upstream reads it.
func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	if isNull(n) {
		return false, true
	}
	if n.Kind == yaml.ScalarNode && (n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 || n.ShortTag() == "!!bool") {
		if b, ok := yamlBools[n.Value]; ok {
			return b, true
		}
	}
	p.errorf(n, path, "want true or false, not %s", describe(n))
	return false, false
}

// integer reads an unquoted integer: 100, 0x64, 0o144, 1_000.
func (p *parser) integer(n *yaml.Node, path string) (int64, bool) {
	if n == nil || n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.errorf(n, path, "want an integer, not %s", describe(n))
		return 0, false
	}
	s := strings.ReplaceAll(n.Value, "_", "")
	if digits := strings.TrimLeft(s, "+-"); len(digits) > 1 && digits[0] == '0' && '0' <= digits[1] && digits[1] <= '9' {
		p.errorf(n, path, "%s has a leading zero, which upstream reads as octal and YAML 1.2 as decimal: drop the zero, or write 0o for octal", n.Value)
		return 0, false
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		p.errorf(n, path, "%s is out of range", n.Value)
		return 0, false
	}
	return v, true
}

// unknown reports a field that has no place in the mapping, suggesting the
// field meant or where it belongs.
func (p *parser) unknown(f field, path, in string, known []string) {
	msg := fmt.Sprintf("unknown field %q in %s", f.name, in)
	switch s := suggest(f.name, known); {
	case s != "":
		msg += fmt.Sprintf("; did you mean %q?", s)
	case in == "a descriptor" && slices.Contains(rateLimitFields, f.name):
		msg += "; it belongs inside rate_limit"
	case in == "rate_limit" && slices.Contains(descriptorFields, f.name):
		msg += "; it belongs in the descriptor, beside rate_limit"
	default:
		msg += " (want " + strings.Join(known, ", ") + ")"
	}
	p.errorf(f.key, join(path, f.name), "%s", msg)
}

// suggest returns the known name within two edits of name, ignoring case.
func suggest(name string, known []string) string {
	if len(name) > 64 {
		return ""
	}
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func describe(n *yaml.Node) string {
	switch {
	case n == nil || n.Kind == 0:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case n.ShortTag() == "!!null":
		return "null"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
		return fmt.Sprintf("the string %q", v)
	}
	return strconv.Quote(v)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
