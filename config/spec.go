package config

import (
	"fmt"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Spec is the content of one config file in structured form, for configs
// that arrive as data instead of YAML text: upstream's RateLimitConfig
// resource over xDS (package config/xds) carries exactly these fields.
// FromSpec reads a Spec by the rules Parse reads YAML by, and reports the
// same problems with the same messages and field paths.
type Spec struct {
	// Domain is the domain field.
	Domain string
	// Descriptors is the descriptors field.
	Descriptors []DescriptorSpec
}

// DescriptorSpec is one descriptor of a Spec: the fields of the YAML
// descriptor of the same names.
type DescriptorSpec struct {
	Key   string
	Value string
	// RateLimit is the rate_limit block; nil for none.
	RateLimit      *RateLimitSpec
	Descriptors    []DescriptorSpec
	ShadowMode     bool
	DetailedMetric bool
	QuotaMode      bool
	// Metadata is a JSON-like tree (map[string]any, []any, string, bool,
	// float64, int64, nil), as structpb.Struct.AsMap returns it; nil for
	// none.
	Metadata map[string]any
}

// RateLimitSpec is a rate_limit block of a DescriptorSpec.
type RateLimitSpec struct {
	// Unit is "second", "minute", "hour", "day", "week", "month" or "year";
	// "" for none, which only an Unlimited rate limit may have.
	Unit string
	// RequestsPerUnit is requests_per_unit; it is ignored when Unlimited.
	RequestsPerUnit uint32
	Unlimited       bool
	Name            string
	// Replaces are the names of the rate limits this one replaces.
	Replaces []string
}

// FromSpec reads one domain from its structured form, as Parse reads it
// from YAML: source names it in errors and in Rule.File, where a file name
// would be. Problems are *Error values with Field set and no line (a Spec
// has none), all at once: "rl-shop: descriptors[0].rate_limit.unit:
// missing unit (want second, …)". The domain goes into a Config through
// New or Loader.New, like a parsed one. It never panics.
func FromSpec(source string, s Spec) (*Domain, error) {
	b := &specBuilder{}
	root := b.mapping()
	b.pair(root, "domain", b.str(s.Domain))
	if len(s.Descriptors) > 0 {
		b.pair(root, "descriptors", b.descriptors(s.Descriptors, "descriptors"))
	}
	if b.err != nil {
		return nil, newError(source, 0, 0, cut(b.errField, maxFieldLen), b.err.Error())
	}
	p := &parser{file: source, budget: b.nodes + extraNodes}
	d := p.domain(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return d, nil
}

// specBuilder turns a Spec into the YAML nodes Parse would have decoded,
// without positions, counting them for the parser's budget. Strings are
// tagged !!str, so that no text ("true", "1") changes type on the way.
type specBuilder struct {
	nodes    int
	err      error // the first value a YAML tree cannot hold
	errField string
}

func (b *specBuilder) node(n *yaml.Node) *yaml.Node {
	b.nodes++
	return n
}

func (b *specBuilder) mapping() *yaml.Node {
	return b.node(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"})
}

func (b *specBuilder) sequence() *yaml.Node {
	return b.node(&yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"})
}

func (b *specBuilder) scalar(tag, v string) *yaml.Node {
	return b.node(&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v})
}

// str is a string; quoted, as metadata reads a quoted scalar as a string
// whatever its text.
func (b *specBuilder) str(s string) *yaml.Node {
	n := b.scalar("!!str", s)
	n.Style = yaml.DoubleQuotedStyle
	return n
}

func (b *specBuilder) boolean(v bool) *yaml.Node {
	return b.scalar("!!bool", strconv.FormatBool(v))
}

func (b *specBuilder) pair(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, b.scalar("!!str", key), v)
}

func (b *specBuilder) descriptors(ds []DescriptorSpec, path string) *yaml.Node {
	seq := b.sequence()
	for i, d := range ds {
		seq.Content = append(seq.Content, b.descriptor(d, fmt.Sprintf("%s[%d]", path, i)))
	}
	return seq
}

// descriptor leaves false booleans and empty values out, as a YAML file
// would: "value" absent and "value: ”" read the same.
func (b *specBuilder) descriptor(d DescriptorSpec, path string) *yaml.Node {
	m := b.mapping()
	b.pair(m, "key", b.str(d.Key))
	if d.Value != "" {
		b.pair(m, "value", b.str(d.Value))
	}
	if r := d.RateLimit; r != nil {
		rl := b.mapping()
		if r.Unit != "" {
			b.pair(rl, "unit", b.str(r.Unit))
		}
		b.pair(rl, "requests_per_unit", b.scalar("!!int", strconv.FormatUint(uint64(r.RequestsPerUnit), 10)))
		if r.Unlimited {
			b.pair(rl, "unlimited", b.boolean(true))
		}
		if r.Name != "" {
			b.pair(rl, "name", b.str(r.Name))
		}
		if len(r.Replaces) > 0 {
			seq := b.sequence()
			for _, name := range r.Replaces {
				item := b.mapping()
				b.pair(item, "name", b.str(name))
				seq.Content = append(seq.Content, item)
			}
			b.pair(rl, "replaces", seq)
		}
		b.pair(m, "rate_limit", rl)
	}
	if len(d.Descriptors) > 0 {
		b.pair(m, "descriptors", b.descriptors(d.Descriptors, join(path, "descriptors")))
	}
	for _, f := range []struct {
		name string
		on   bool
	}{{"shadow_mode", d.ShadowMode}, {"detailed_metric", d.DetailedMetric}, {"quota_mode", d.QuotaMode}} {
		if f.on {
			b.pair(m, f.name, b.boolean(true))
		}
	}
	if d.Metadata != nil {
		b.pair(m, "metadata", b.value(d.Metadata, join(path, "metadata"), 0))
	}
	return m
}

// value is a metadata value. Nesting is cut at the parser's own limit, so
// that it reports it; numbers are floats, as in a structpb.Struct, and a
// NaN or an infinity is left for the parser to refuse by name.
func (b *specBuilder) value(v any, path string, depth int) *yaml.Node {
	if depth > maxDepth+1 {
		return b.scalar("!!null", "")
	}
	switch x := v.(type) {
	case nil:
		return b.scalar("!!null", "")
	case bool:
		return b.boolean(x)
	case string:
		return b.str(x)
	case float64:
		return b.scalar("!!float", strconv.FormatFloat(x, 'g', -1, 64))
	case int64:
		return b.scalar("!!int", strconv.FormatInt(x, 10))
	case int:
		return b.scalar("!!int", strconv.Itoa(x))
	case map[string]any:
		m := b.mapping()
		for _, k := range sortedKeys(x) {
			b.pair(m, k, b.value(x[k], join(path, k), depth+1))
		}
		return m
	case []any:
		seq := b.sequence()
		for i, item := range x {
			seq.Content = append(seq.Content, b.value(item, fmt.Sprintf("%s[%d]", path, i), depth+1))
		}
		return seq
	}
	if b.err == nil {
		b.err = fmt.Errorf("metadata holds a %T, which is not a JSON value (want map[string]any, []any, string, bool, float64, int64 or nil)", v)
		b.errField = path
	}
	return b.scalar("!!null", "")
}

// sortedKeys returns m's keys sorted, so that the problems of one Spec
// are always reported in one order.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// where is "file:line", or file alone when there is no line (a domain
// read by FromSpec).
func where(file string, line int) string {
	if line == 0 {
		return file
	}
	return file + ":" + strconv.Itoa(line)
}
