package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// FuzzForwarded feeds arbitrary Forwarded and X-Forwarded-For values to
// the parsers and to ClientIP. They must not panic; a key must be an
// address in the fixed form; and a value that parses must keep parsing to
// the same hops when a trusted proxy appends an element, so what a client
// writes can never change what comes after it.
func FuzzForwarded(f *testing.F) {
	// The seed corpus is also in testdata/fuzz/FuzzForwarded.
	for _, s := range []string{
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		`for="[2001:db8:cafe::17]:4711"`,
		"for=unknown, for=_hidden",
		`for="\"quoted\\"`,
		"198.51.100.1, 203.0.113.7",
		"",
	} {
		f.Add(s)
	}
	trusted := ClientIP{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	f.Fuzz(func(t *testing.T, v string) {
		fors, ok := parseForwarded([]string{v})
		if ok {
			more, ok2 := parseForwarded([]string{v + ", for=192.0.2.1"})
			if !ok2 || len(more) != len(fors)+1 || more[len(more)-1] != "192.0.2.1" {
				t.Fatalf("parseForwarded(%q) = %q, but with an element appended %q, %v", v, fors, more, ok2)
			}
		}
		hops, ok := parseXForwardedFor([]string{v})
		if ok {
			for _, h := range hops {
				if h == "" || strings.Contains(h, ",") {
					t.Fatalf("parseXForwardedFor(%q) has hop %q", v, h)
				}
			}
		}
		for _, c := range []ClientIP{trusted, {TrustedProxies: trusted.TrustedProxies, UseForwarded: true}} {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "10.0.0.1:80"
			r.Header = http.Header{"Forwarded": {v}, "X-Forwarded-For": {v}}
			key := c.Key(r)
			if key == "" {
				continue
			}
			s, ok := strings.CutPrefix(key, "ip:")
			if !ok {
				t.Fatalf("key %q", key)
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				if p.Addr().Is4() || p.Bits() != 64 {
					t.Fatalf("key %q: only IPv6 is grouped, by /64", key)
				}
			} else if a, err := netip.ParseAddr(s); err != nil || !a.Is4() || a.Zone() != "" {
				t.Fatalf("key %q is not an IPv4 address or an IPv6 /64", key)
			}
		}
	})
}
