package httpapi

import "unicode/utf8"

// The body of POST /v1/allow, read by hand when it is plain: decodeAllow
// takes the body of almost every request (objects of the fields of
// AllowRequest, DescriptorJSON, EntryJSON and LimitJSON by their exact
// names, each at most once, strings without a backslash or a control
// byte, integers without a fraction or an exponent and of at most 18
// digits, true and false, no null) and declines anything else, which
// decodeStrict (encoding/json) then decodes: every body it declines,
// and so every error and its 400, is encoding/json's as before. What it
// accepts it decodes to exactly the value encoding/json would
// (TestDecodeAllowMatchesEncodingJSON compares the two on generated
// bodies, FuzzDecodeAllow on fuzzed ones). encoding/json's reflection
// was the largest part of the handler's own CPU per decision.

// decodeAllow decodes body into req (which must be zero) and reports
// whether it did; false leaves req in an unspecified state.
func decodeAllow(body []byte, req *AllowRequest) bool {
	d := allowDecoder{b: body}
	d.ws()
	if !d.allowRequest(req) {
		return false
	}
	d.ws()
	return d.i == len(d.b)
}

// allowDecoder reads b from i.
type allowDecoder struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (d *allowDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// consume skips whitespace and c, reporting whether c was next.
func (d *allowDecoder) consume(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling field with each member's name (its
// raw bytes, which have no escape) positioned at its value; field
// reports whether it read the value. It declines an empty name, a name
// given twice (by the bit field returns for it: 0 is unknown) and any
// syntax but the plain one.
func (d *allowDecoder) object(field func(name []byte) (bit uint32, ok bool)) bool {
	if !d.consume('{') {
		return false
	}
	if d.consume('}') {
		return true
	}
	var seen uint32
	for {
		d.ws()
		name, ok := d.rawString()
		if !ok || !d.consume(':') {
			return false
		}
		d.ws()
		bit, ok := field(name)
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		if d.consume(',') {
			continue
		}
		return d.consume('}')
	}
}

// array reads an array, calling elem at each element; it reports an
// empty one by n == 0.
func (d *allowDecoder) array(elem func() bool) (n int, ok bool) {
	if !d.consume('[') {
		return 0, false
	}
	if d.consume(']') {
		return 0, true
	}
	for {
		d.ws()
		if !elem() {
			return n, false
		}
		n++
		if d.consume(',') {
			continue
		}
		return n, d.consume(']')
	}
}

// rawString reads a string at i of valid UTF-8 that has no escape and
// no control byte, returning its bytes.
func (d *allowDecoder) rawString() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			if !ascii && !utf8.Valid(d.b[start:j]) {
				return nil, false
			}
			d.i = j + 1
			return d.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// str reads a string value into *s.
func (d *allowDecoder) str(s *string) bool {
	b, ok := d.rawString()
	if ok {
		*s = string(b)
	}
	return ok
}

// integer reads an integer that certainly fits an int64: an optional minus,
// then 0 or 1 to 18 digits not starting with 0. What follows it must be
// a delimiter, which the caller checks.
func (d *allowDecoder) integer() (int64, bool) {
	j := d.i
	neg := j < len(d.b) && d.b[j] == '-'
	if neg {
		j++
	}
	start := j
	var n int64
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		n = n*10 + int64(d.b[j]-'0')
		j++
	}
	digits := j - start
	if digits == 0 || digits > 18 || (digits > 1 && d.b[start] == '0') {
		return 0, false
	}
	if j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E') {
		return 0, false
	}
	d.i = j
	if neg {
		n = -n
	}
	return n, true
}

// intPtr reads an integer into a new *int64 at *p.
func (d *allowDecoder) intPtr(p **int64) bool {
	n, ok := d.integer()
	if ok {
		*p = &n
	}
	return ok
}

// boolean reads true or false into *v.
func (d *allowDecoder) boolean(v *bool) bool {
	rest := d.b[d.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*v, d.i = true, d.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*v, d.i = false, d.i+5
	default:
		return false
	}
	return true
}

// Bits of AllowRequest's fields, to find one given twice.
const (
	fKey uint32 = 1 << iota
	fLimit
	fCost
	fDomain
	fDescriptors
	fHits
	fPriority
	fMaxWaitMS
)

func (d *allowDecoder) allowRequest(req *AllowRequest) bool {
	return d.object(func(name []byte) (uint32, bool) {
		switch string(name) {
		case "key":
			return fKey, d.str(&req.Key)
		case "limit":
			req.Limit = new(LimitJSON)
			return fLimit, d.limit(req.Limit)
		case "cost":
			return fCost, d.intPtr(&req.Cost)
		case "domain":
			return fDomain, d.str(&req.Domain)
		case "descriptors":
			return fDescriptors, d.descriptors(&req.Descriptors)
		case "hits":
			return fHits, d.intPtr(&req.Hits)
		case "priority":
			return fPriority, d.str(&req.Priority)
		case "max_wait_ms":
			return fMaxWaitMS, d.intPtr(&req.MaxWaitMS)
		}
		return 0, false
	})
}

// maxStackElems is how many descriptors, or entries of one, are
// gathered on the stack before the slice of their exact length is made.
const maxStackElems = 8

func (d *allowDecoder) descriptors(ds *[]DescriptorJSON) bool {
	var buf [maxStackElems]DescriptorJSON
	out := buf[:0]
	n, ok := d.array(func() bool {
		out = append(out, DescriptorJSON{})
		return d.descriptor(&out[len(out)-1])
	})
	if !ok {
		return false
	}
	// encoding/json makes an empty array an empty slice, not nil.
	*ds = append(make([]DescriptorJSON, 0, n), out...)
	return true
}

// Bits of DescriptorJSON's fields.
const (
	fEntries uint32 = 1 << iota
	fDescHits
	fDescLimit
)

func (d *allowDecoder) descriptor(desc *DescriptorJSON) bool {
	return d.object(func(name []byte) (uint32, bool) {
		switch string(name) {
		case "entries":
			return fEntries, d.entries(&desc.Entries)
		case "hits":
			return fDescHits, d.intPtr(&desc.Hits)
		case "limit":
			desc.Limit = new(LimitJSON)
			return fDescLimit, d.limit(desc.Limit)
		}
		return 0, false
	})
}

// Bits of EntryJSON's fields.
const (
	fEntryKey uint32 = 1 << iota
	fEntryValue
)

func (d *allowDecoder) entries(es *[]EntryJSON) bool {
	var buf [maxStackElems]EntryJSON
	out := buf[:0]
	n, ok := d.array(func() bool {
		out = append(out, EntryJSON{})
		e := &out[len(out)-1]
		return d.object(func(name []byte) (uint32, bool) {
			switch string(name) {
			case "key":
				return fEntryKey, d.str(&e.Key)
			case "value":
				return fEntryValue, d.str(&e.Value)
			}
			return 0, false
		})
	})
	if !ok {
		return false
	}
	*es = append(make([]EntryJSON, 0, n), out...)
	return true
}

// Bits of LimitJSON's fields.
const (
	fLimAlgorithm uint32 = 1 << iota
	fLimLimit
	fLimPeriod
	fLimUnit
	fLimTimeZone
	fLimAnchor
	fLimBurst
	fLimWindow
	fLimCountRejected
	fLimName
)

func (d *allowDecoder) limit(l *LimitJSON) bool {
	return d.object(func(name []byte) (uint32, bool) {
		switch string(name) {
		case "algorithm":
			return fLimAlgorithm, d.str(&l.Algorithm)
		case "limit":
			return fLimLimit, d.intPtr(&l.Limit)
		case "period":
			return fLimPeriod, d.str(&l.Period)
		case "unit":
			return fLimUnit, d.str(&l.Unit)
		case "time_zone":
			return fLimTimeZone, d.str(&l.TimeZone)
		case "anchor":
			return fLimAnchor, d.str(&l.Anchor)
		case "burst":
			n, ok := d.integer()
			l.Burst = n
			return fLimBurst, ok
		case "window":
			return fLimWindow, d.str(&l.Window)
		case "count_rejected":
			return fLimCountRejected, d.boolean(&l.CountRejected)
		case "name":
			return fLimName, d.str(&l.Name)
		}
		return 0, false
	})
}
