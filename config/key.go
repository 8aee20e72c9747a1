package config

import "strings"

// Key returns the store key of a request descriptor: the domain and every
// entry's key and actual value, so that each distinct value of a key-only
// or wildcard entry has its own counter, as upstream counts them:
//
//	messaging|message_type=marketing|to_number=2061111111
//
// The bytes '%', '|' and '=' of the domain, keys and values are escaped as
// %25, %7C and %3D, so two different descriptors never share a key; all
// other bytes are kept as they are (a path such as /api/v1 reads as is). Stores escape or hash the key further
// as their own syntax requires. Most callers want Rule.Key, which also
// applies share_threshold; Key alone suits a limit given in the request
// (Envoy's descriptor-level limit override).
func Key(domain string, entries []Entry) string {
	var b strings.Builder
	b.Grow(keyLen(domain, entries, nil))
	writeKey(&b, domain, entries, nil)
	return b.String()
}

// Key returns the store key of entries, a request descriptor that matched
// the rule: Key(r.Domain, entries), except that a wildcard level with
// share_threshold contributes its pattern instead of the request's value,
// so that all values matching it share one counter. It allocates once.
func (r *Rule) Key(entries []Entry) string {
	var b strings.Builder
	b.Grow(keyLen(r.Domain, entries, r.Path))
	writeKey(&b, r.Domain, entries, r.Path)
	return b.String()
}

// AppendKey appends r.Key(entries) to dst, for callers that reuse a buffer.
func (r *Rule) AppendKey(dst []byte, entries []Entry) []byte {
	dst = appendEscaped(dst, r.Domain)
	for i, e := range entries {
		dst = append(dst, '|')
		dst = appendEscaped(dst, e.Key)
		dst = append(dst, '=')
		dst = appendEscaped(dst, keyValue(r.Path, i, e))
	}
	return dst
}

// keyValue is the value that entry i contributes to a key: the pattern of a
// shared wildcard level, else the request's value.
func keyValue(path []Level, i int, e Entry) string {
	if i < len(path) && path[i].ShareThreshold && path[i].Wildcard() {
		return path[i].Value
	}
	return e.Value
}

func writeKey(b *strings.Builder, domain string, entries []Entry, path []Level) {
	writeEscaped(b, domain)
	for i, e := range entries {
		b.WriteByte('|')
		writeEscaped(b, e.Key)
		b.WriteByte('=')
		writeEscaped(b, keyValue(path, i, e))
	}
}

func keyLen(domain string, entries []Entry, path []Level) int {
	n := escapedLen(domain)
	for i, e := range entries {
		n += 2 + escapedLen(e.Key) + escapedLen(keyValue(path, i, e))
	}
	return n
}

// ruleID is the ID of a rule: like a key, with the config's values, and
// without "=" for key-only levels.
func ruleID(domain string, path []Level) string {
	var b strings.Builder
	writeEscaped(&b, domain)
	for _, l := range path {
		b.WriteByte('|')
		writeEscaped(&b, l.Key)
		if l.Value != "" {
			b.WriteByte('=')
			writeEscaped(&b, l.Value)
		}
	}
	return b.String()
}

func needsEscape(c byte) bool { return c == '%' || c == '|' || c == '=' }

const hexDigits = "0123456789ABCDEF"

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n += 2
		}
	}
	return n
}

func writeEscaped(b *strings.Builder, s string) {
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; needsEscape(c) {
			b.WriteString(s[start:i])
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			start = i + 1
		}
	}
	b.WriteString(s[start:])
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}

// MetricKey names the rule for metrics the way envoyproxy/ratelimit names
// its stats: the domain and each level's key, with "_" and the config's
// value where the config gives one, joined by ".":
// "messaging.message_type_marketing.to_number". A level with
// value_to_metric, and every level when the rule has detailed_metric, shows
// the request's value instead ("messaging.message_type_marketing.to_number_2061111111"),
// so those metrics have one series per value: mind the cardinality. The
// name is for people and dashboards, not a key: it is not escaped.
func (r *Rule) MetricKey(entries []Entry) string {
	var b strings.Builder
	b.WriteString(r.Domain)
	for i, l := range r.Path {
		b.WriteByte('.')
		b.WriteString(l.Key)
		v := l.Value
		if (r.DetailedMetric || l.ValueToMetric) && i < len(entries) {
			v = entries[i].Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}
