package httplimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"

	"github.com/floodgate-rl/floodgate/internal/netkey"
)

// ClientIP finds the address of the client that sent a request and makes a
// key of it. The zero value believes no forwarding header and keys on the
// peer address of the connection: right for a server that clients reach
// directly, wrong behind a proxy (every client would share the proxy's
// address). ClientIP is a small value, safe to copy and for concurrent use;
// Key is the method most callers want, as Config.Key.
//
// Behind reverse proxies, list them in TrustedProxies. The forwarding
// header (X-Forwarded-For, or Forwarded if UseForwarded) is read only when
// the peer is trusted, and then from the right, hop by hop, for as long as
// the hops are trusted: the first untrusted address is the client. A client
// can write anything at the left of the header, but not past the address
// its first trusted proxy appends, so it cannot choose its key. If every
// hop is trusted, the leftmost is the client (a client inside a trusted
// network). There is no key, and Config.MissingKey decides, when the hop
// where the walk stops is not an address ("unknown", an obfuscated
// identifier, garbage) or when a trusted peer sends no forwarding header
// at all (a proxy set up to write the other header): ClientIP never falls
// back to a proxy's own address, which would pool every client behind it.
// Skip the proxies' own health checks with Config.Skip.
//
// Read the header your trusted proxies actually write, and only that one:
// a proxy that writes X-Forwarded-For passes a client's Forwarded header
// through unchanged, so believing Forwarded there would let the client
// choose its key.
type ClientIP struct {
	// TrustedProxies are the networks of the proxies in front of the
	// server (10.0.0.0/8, the load balancer's subnet). Empty trusts none.
	TrustedProxies []netip.Prefix
	// UseForwarded reads the RFC 7239 Forwarded header (its "for"
	// parameters) instead of X-Forwarded-For.
	UseForwarded bool
	// IPv4Prefix groups IPv4 clients by network: 24 keys a whole /24 as
	// one client. 0 means 32, each address alone.
	IPv4Prefix int
	// IPv6Prefix groups IPv6 clients by network. 0 means 64: one host
	// usually holds a whole /64, so keying single IPv6 addresses lets it
	// use 2^64 keys.
	IPv6Prefix int
}

// Key is the key of r's client: "ip:" and the address, or its network when
// grouped ("ip:203.0.113.7", "ip:2001:db8:1:2::/64"); "" if there is none.
func (c ClientIP) Key(r *http.Request) string {
	a, ok := c.Addr(r)
	if !ok {
		return ""
	}
	return netkey.Key(a, c.IPv4Prefix, c.IPv6Prefix)
}

// Addr is the address of r's client, found as the type doc says, with an
// IPv4-mapped IPv6 address unmapped and any zone dropped. It reports false
// if there is none: RemoteAddr is not an address (a Unix socket), or the
// walk through the forwarding header stopped at a hop that is not one.
func (c ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	peer, ok := netkey.ParseHostPort(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !c.trusted(peer) {
		return peer, true
	}
	var hops []string
	var valid bool
	if c.UseForwarded {
		hops, valid = parseForwarded(r.Header.Values("Forwarded"))
	} else {
		hops, valid = parseXForwardedFor(r.Header.Values("X-Forwarded-For"))
	}
	if !valid || len(hops) == 0 {
		return netip.Addr{}, false
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := c.parseHop(hops[i])
		if !ok {
			return netip.Addr{}, false
		}
		client = a
		if !c.trusted(a) {
			break
		}
	}
	return client, true
}

func (c ClientIP) parseHop(hop string) (netip.Addr, bool) {
	if c.UseForwarded {
		return parseNode(hop)
	}
	return netkey.ParseHostPort(hop)
}

func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Header keys requests by the value of the header name (an API key):
// "header:" + the canonical name + ":" + the hex SHA-256 of the first
// value, so the secret itself never reaches the store's keys, logs or
// metrics. A request without the header, or with an empty value, has no
// key. The hash is unsalted: right for high-entropy secrets such as API
// keys, not for guessable values (user names), which a KeyFunc should key
// with an HMAC.
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	prefix := "header:" + name + ":"
	return func(r *http.Request) string {
		v := r.Header.Get(name)
		if v == "" {
			return ""
		}
		sum := sha256.Sum256([]byte(v))
		return prefix + hex.EncodeToString(sum[:])
	}
}

// parseXForwardedFor splits X-Forwarded-For field values (every line of
// the field, in order) into hops, leftmost first, each trimmed of spaces.
// A blank line is skipped; it reports false if a hop within a line is
// empty. It does not check that the hops are
// addresses; ClientIP does, hop by hop, from the right.
func parseXForwardedFor(values []string) (hops []string, ok bool) {
	for _, v := range values {
		if strings.Trim(v, " \t") == "" {
			continue
		}
		for hop := range strings.SplitSeq(v, ",") {
			hop = strings.Trim(hop, " \t")
			if hop == "" {
				return nil, false
			}
			hops = append(hops, hop)
		}
	}
	return hops, true
}

// parseForwarded parses RFC 7239 Forwarded field values (every line of the
// field, in order) and returns the "for" parameter of each element,
// leftmost first, unquoted; "" for an element without one. It reports
// false if the field does not follow the RFC's grammar (a parameter
// without "=", a bad token, an unterminated quoted string, "for" twice in
// one element). Empty list elements are skipped, as RFC 9110 asks.
func parseForwarded(values []string) (fors []string, ok bool) {
	for _, v := range values {
		p := fwdParser{s: v}
		for {
			p.ows()
			if p.eof() {
				break
			}
			if p.peek() == ',' { // an empty list element
				p.i++
				continue
			}
			f, ok := p.element()
			if !ok {
				return nil, false
			}
			fors = append(fors, f)
			p.ows()
			if p.eof() {
				break
			}
			if p.peek() != ',' {
				return nil, false
			}
			p.i++
		}
	}
	return fors, true
}

type fwdParser struct {
	s string
	i int
}

func (p *fwdParser) eof() bool  { return p.i >= len(p.s) }
func (p *fwdParser) peek() byte { return p.s[p.i] }

func (p *fwdParser) ows() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// element parses forwarded-element = [ pair ] *( ";" [ pair ] ) and
// returns its "for" value.
func (p *fwdParser) element() (string, bool) {
	var forValue string
	seen := false
	for {
		p.ows()
		if !p.eof() && p.peek() != ';' && p.peek() != ',' {
			name := p.token()
			if name == "" || p.eof() || p.peek() != '=' {
				return "", false
			}
			p.i++
			value, ok := p.value()
			if !ok {
				return "", false
			}
			if strings.EqualFold(name, "for") {
				if seen {
					return "", false
				}
				forValue, seen = value, true
			}
			p.ows()
		}
		if p.eof() || p.peek() == ',' {
			return forValue, true
		}
		if p.peek() != ';' {
			return "", false
		}
		p.i++
	}
}

func (p *fwdParser) token() string {
	start := p.i
	for !p.eof() && isTchar(p.peek()) {
		p.i++
	}
	return p.s[start:p.i]
}

// value parses token / quoted-string.
func (p *fwdParser) value() (string, bool) {
	if p.eof() {
		return "", false
	}
	if p.peek() != '"' {
		t := p.token()
		return t, t != ""
	}
	p.i++
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '"':
			return b.String(), true
		case c == '\\':
			if p.eof() {
				return "", false
			}
			c = p.peek()
			p.i++
			if c < 0x20 && c != '\t' || c == 0x7f {
				return "", false
			}
			b.WriteByte(c)
		case c < 0x20 && c != '\t' || c == 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}

func isTchar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// parseNode parses an RFC 7239 node: an IPv4 address or a bracketed IPv6
// address, with an optional port (a number or an obfuscated "_port"). It
// reports false for "unknown", an obfuscated identifier, and anything else.
func parseNode(s string) (netip.Addr, bool) {
	var host, port string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = s[1:end], s[end+1:]
		if port != "" && port[0] != ':' {
			return netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i:]
	} else {
		host = s
	}
	if port != "" && !validPort(port[1:]) {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" || strings.HasPrefix(s, "[") != a.Is6() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func validPort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return len(p) > 1
	}
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}
