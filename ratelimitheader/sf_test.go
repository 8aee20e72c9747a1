package ratelimitheader_test

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// This file is a parser of the Structured Field Lists of RFC 9651 (section
// 4.2), enough of it to check the fields against the draft's grammar: Lists
// of Items with Parameters, whose bare items are Integers, Decimals,
// Strings, Tokens, Byte Sequences or Booleans. It follows the RFC's parsing
// algorithm step by step and fails where the RFC says parsing fails.

type sfItem struct {
	Value  any // int64, float64 (decimal), string, sfToken, []byte, bool
	Params []sfParam
}

type sfParam struct {
	Key   string
	Value any
}

type sfToken string

// param returns the value of the parameter key, and whether it is there.
func (it sfItem) param(key string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

// parseList parses a List field value.
func parseList(s string) ([]sfItem, error) {
	p := &sfParser{s: strings.Trim(s, " ")}
	var items []sfItem
	for p.i < len(p.s) {
		if p.peek() == '(' {
			return nil, p.fail("inner lists are not used by these fields")
		}
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.ows()
		if p.i == len(p.s) {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.fail("want ','")
		}
		p.i++
		p.ows()
		if p.i == len(p.s) {
			return nil, p.fail("trailing comma")
		}
	}
	return items, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) fail(msg string) error {
	return fmt.Errorf("sf: %s at %d in %q", msg, p.i, p.s)
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) ows() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	ps, err := p.params()
	return sfItem{v, ps}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var ps []sfParam
	for p.peek() == ';' {
		p.i++
		for p.peek() == ' ' {
			p.i++
		}
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.peek() == '=' {
			p.i++
			if v, err = p.bare(); err != nil {
				return nil, err
			}
		}
		for j := range ps { // a repeated key overwrites (RFC 9651, 4.2.3.2)
			if ps[j].Key == key {
				ps = append(ps[:j], ps[j+1:]...)
				break
			}
		}
		ps = append(ps, sfParam{key, v})
	}
	return ps, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", p.fail("key must start with lcalpha or '*'")
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (any, error) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		return p.bytes()
	case c == '?':
		p.i++
		switch p.peek() {
		case '0', '1':
			p.i++
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.fail("bad boolean")
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for p.i < len(p.s) && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, p.fail("unrecognised bare item")
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	if c := p.peek(); c < '0' || c > '9' {
		return nil, p.fail("number without digits")
	}
	dot := -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' && dot < 0 {
			dot = p.i
		} else if c < '0' || c > '9' {
			break
		}
		p.i++
		digits := p.i - start
		if p.s[start] == '-' {
			digits--
		}
		if dot < 0 && digits > 15 || dot >= 0 && digits > 16 {
			return nil, p.fail("number too long")
		}
	}
	num := p.s[start:p.i]
	if dot < 0 {
		return strconv.ParseInt(num, 10, 64)
	}
	if dot-start > 12 || p.i-dot-1 < 1 || p.i-dot-1 > 3 {
		return nil, p.fail("bad decimal")
	}
	return strconv.ParseFloat(num, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++ // the opening DQUOTE
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) {
				return nil, p.fail("string ends in an escape")
			}
			n := p.s[p.i]
			p.i++
			if n != '"' && n != '\\' {
				return nil, p.fail("bad escape")
			}
			b.WriteByte(n)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.fail("byte outside printable ASCII in a string")
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.fail("unterminated string")
}

func (p *sfParser) bytes() (any, error) {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return nil, p.fail("unterminated byte sequence")
	}
	b, err := base64.StdEncoding.DecodeString(p.s[p.i : p.i+end])
	p.i += end + 1
	return b, err
}
