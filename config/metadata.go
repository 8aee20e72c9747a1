package config

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// metadata reads a descriptor's metadata: any YAML mapping, kept as a
// JSON-like tree, as upstream reads it into a google.protobuf.Struct.
// Scalars are read as upstream's yaml.v2 reads them into interface{}:
// null, booleans (YAML 1.1 spellings too), integers (int64; float64
// beyond it), floats (float64) and strings (anything else: timestamps,
// addresses). Null or
// an empty mapping is no metadata. Upstream refuses what a Struct cannot
// hold only when it converts it; here every problem is reported at its
// line: a mapping is required at the top, and a float must be finite
// (JSON has no NaN or infinity, so Envoy's metadata could not carry it).
func (p *parser) metadata(n *yaml.Node, path string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of names to values, not %s", describe(n))
		return nil
	}
	m, _ := p.metaValue(n, path, 0).(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

func (p *parser) metaValue(n *yaml.Node, path string, depth int) any {
	n = p.resolve(n)
	if n == nil {
		p.errorf(nil, path, "an alias that leads nowhere")
		return nil
	}
	if depth > maxDepth {
		p.errorf(n, path, "nested deeper than %d levels", maxDepth)
		return nil
	}
	if !p.visit(n) {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, f := range p.fields(n, path, 0) {
			m[f.name] = p.metaValue(f.val, join(path, f.name), depth+1)
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, item := range n.Content {
			l[i] = p.metaValue(item, path+"["+strconv.Itoa(i)+"]", depth+1)
		}
		return l
	case yaml.ScalarNode:
		return p.metaScalar(n, path)
	}
	p.errorf(n, path, "want a value, not %s", describe(n))
	return nil
}

func (p *parser) metaScalar(n *yaml.Node, path string) any {
	quoted := n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0
	switch tag := n.ShortTag(); {
	case quoted && tag == "!!str":
		return n.Value
	case tag == "!!null":
		return nil
	case tag == "!!bool":
		return yamlBools[n.Value]
	case tag == "!!int":
		text := strings.ReplaceAll(n.Value, "_", "")
		if _, err := strconv.ParseInt(text, 0, 64); errors.Is(err, strconv.ErrRange) {
			// Beyond int64: a number all the same, as upstream's Struct
			// holds every number, as a float64.
			if f, err := strconv.ParseFloat(text, 64); err == nil {
				return f
			}
		}
		v, _ := p.integer(n, path)
		return v
	case tag == "!!float":
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			p.errorf(n, path, "%s is not a finite number (JSON, and so Envoy's metadata, has no NaN or infinity); quote it for a string", n.Value)
			return nil
		}
		return f
	}
	if b, ok := yamlBools[n.Value]; ok && !quoted {
		return b // YAML 1.1's yes, no, on, off, as upstream's yaml.v2 reads them
	}
	return n.Value
}
