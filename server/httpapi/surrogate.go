package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"
)

// loneSurrogate finds the first string of body, a valid JSON value, that
// holds a \u escape of half a UTF-16 surrogate pair (\ud800 to \udfff)
// without its other half, and returns its field ("descriptors[0].
// entries[1].value"; a key names itself). encoding/json reads such an
// escape as U+FFFD, as it reads invalid UTF-8, so "a\ud800" and
// "a\udbff" would be one key and share one budget: refused, like
// invalid UTF-8. Almost no body holds a \u escape of a surrogate, so
// the scan of the JSON only runs for one that seems to.
func loneSurrogate(body []byte) (field string, found bool) {
	if !maybeSurrogate(body) {
		return "", false
	}
	s := surrogateScan{b: body}
	return s.value("")
}

// maybeSurrogate reports whether body holds `\u` and then a D and one of
// 8 to F, in either case: a surrogate's escape, or text that looks like
// one (an escaped backslash before "ud800").
func maybeSurrogate(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+3 >= len(b) {
			return false
		}
		if c, d := b[i+2], b[i+3]; (c == 'd' || c == 'D') && (d >= '8' && d <= '9' || d >= 'a' && d <= 'f' || d >= 'A' && d <= 'F') {
			return true
		}
		b = b[i+2:]
	}
}

// surrogateScan walks a valid JSON value, naming the path of each string.
type surrogateScan struct {
	b []byte
	i int
}

func (s *surrogateScan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value walks the value at s.i, whose field is path.
func (s *surrogateScan) value(path string) (string, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return "", false
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		for {
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] == '}' {
				s.i++
				return "", false
			}
			if s.b[s.i] == ',' {
				s.i++
				continue
			}
			raw := s.str()
			var key string
			_ = json.Unmarshal(raw, &key)
			field := key
			if path != "" {
				field = path + "." + key
			}
			if lone(raw) {
				return field, true
			}
			s.ws()
			s.i++ // ':'
			if f, ok := s.value(field); ok {
				return f, true
			}
		}
	case '[':
		s.i++
		for n := 0; ; {
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] == ']' {
				s.i++
				return "", false
			}
			if s.b[s.i] == ',' {
				s.i++
				n++
				continue
			}
			if f, ok := s.value(path + "[" + strconv.Itoa(n) + "]"); ok {
				return f, true
			}
		}
	case '"':
		if lone(s.str()) {
			return cmp.Or(path, "body"), true
		}
		return "", false
	default: // a number, true, false, null
		for s.i < len(s.b) && !bytes.ContainsRune([]byte(",]} \t\n\r"), rune(s.b[s.i])) {
			s.i++
		}
		return "", false
	}
}

// str returns the string at s.i, quotes included, and moves past it.
func (s *surrogateScan) str() []byte {
	start := s.i
	for s.i++; s.i < len(s.b); s.i++ {
		switch s.b[s.i] {
		case '\\':
			s.i++
		case '"':
			s.i++
			return s.b[start:s.i]
		}
	}
	return s.b[start:]
}

// lone reports whether a JSON string, quotes included, holds the \u
// escape of a surrogate that is not the high half of a pair followed at
// once by the escape of its low half.
func lone(raw []byte) bool {
	for j := 0; j < len(raw); j++ {
		if raw[j] != '\\' {
			continue
		}
		j++
		if j >= len(raw) || raw[j] != 'u' {
			continue
		}
		r, ok := hex4(raw[j+1:])
		if !ok {
			continue
		}
		j += 4
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if j+6 < len(raw) && raw[j+1] == '\\' && raw[j+2] == 'u' {
				if lo, ok := hex4(raw[j+3:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
					j += 6
					continue
				}
			}
			return true
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		}
	}
	return false
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}
