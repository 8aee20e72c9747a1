package httplimit_test

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/middleware/httplimit"
)

var proxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}

func TestClientIP(t *testing.T) {
	t.Parallel()
	xff := httplimit.ClientIP{TrustedProxies: proxies}
	fwd := httplimit.ClientIP{TrustedProxies: proxies, UseForwarded: true}
	for _, tc := range []struct {
		name   string
		ip     httplimit.ClientIP
		remote string
		header map[string][]string
		want   string
	}{
		// The peer address, when no proxy is trusted or the peer is not one.
		{"peer", httplimit.ClientIP{}, "203.0.113.7:1234", nil, "ip:203.0.113.7"},
		{"spoofed X-Forwarded-For, no proxy trusted", httplimit.ClientIP{}, "203.0.113.7:1234",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "ip:203.0.113.7"},
		{"spoofed X-Forwarded-For from an untrusted peer", xff, "203.0.113.7:1234",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1"}}, "ip:203.0.113.7"},
		{"spoofed Forwarded from an untrusted peer", fwd, "203.0.113.7:1234",
			map[string][]string{"Forwarded": {"for=198.51.100.1"}}, "ip:203.0.113.7"},
		{"spoofed X-Forwarded-For from an untrusted IPv6 peer", xff, "[2001:db8:1:2:3:4:5:6]:443",
			map[string][]string{"X-Forwarded-For": {"10.0.0.5"}}, "ip:2001:db8:1:2::/64"},

		// X-Forwarded-For from trusted proxies.
		{"one proxy", xff, "10.0.0.1:80", map[string][]string{"X-Forwarded-For": {"203.0.113.7"}}, "ip:203.0.113.7"},
		{"client prepends a spoof", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7"}}, "ip:203.0.113.7"},
		{"client prepends a trusted-looking spoof", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"10.9.9.9, 203.0.113.7"}}, "ip:203.0.113.7"},
		{"two proxies", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 10.0.0.2"}}, "ip:203.0.113.7"},
		{"several field lines", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1", "203.0.113.7, 10.0.0.2"}}, "ip:203.0.113.7"},
		{"blank field line", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7", " "}}, "ip:203.0.113.7"},
		{"all hops trusted: the leftmost", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"10.1.1.1, 10.0.0.2"}}, "ip:10.1.1.1"},
		{"garbage left of the client", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"<script>, 203.0.113.7"}}, "ip:203.0.113.7"},
		{"garbage where the client should be", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"203.0.113.7, not-an-ip"}}, ""},
		{"empty hop", xff, "10.0.0.1:80", map[string][]string{"X-Forwarded-For": {"203.0.113.7,,10.0.0.2"}}, ""},
		{"trusted peer without the header", xff, "10.0.0.1:80", nil, ""},
		{"trusted peer writing the other header", xff, "10.0.0.1:80",
			map[string][]string{"Forwarded": {"for=203.0.113.7"}}, ""},
		{"hop with a port", xff, "10.0.0.1:80", map[string][]string{"X-Forwarded-For": {"203.0.113.7:5555"}}, "ip:203.0.113.7"},
		{"IPv6 hop", xff, "10.0.0.1:80", map[string][]string{"X-Forwarded-For": {"2001:db8:1:2::99"}}, "ip:2001:db8:1:2::/64"},
		{"bracketed IPv6 hop with port", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"[2001:db8:1:2::99]:80"}}, "ip:2001:db8:1:2::/64"},
		{"bracketed IPv6 hop", xff, "10.0.0.1:80",
			map[string][]string{"X-Forwarded-For": {"[2001:db8:1:2::99]"}}, "ip:2001:db8:1:2::/64"},
		{"IPv4-mapped hop", xff, "10.0.0.1:80", map[string][]string{"X-Forwarded-For": {"::ffff:203.0.113.7"}}, "ip:203.0.113.7"},
		{"IPv6 proxies", xff, "[2001:db8:ffff::1]:80",
			map[string][]string{"X-Forwarded-For": {"198.51.100.1, 203.0.113.7, 2001:db8:ffff::2"}}, "ip:203.0.113.7"},

		// Forwarded (RFC 7239) from trusted proxies.
		{"Forwarded", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=192.0.2.60;proto=http;by=203.0.113.43"}}, "ip:192.0.2.60"},
		{"Forwarded quoted IPv6 and port", fwd, "10.0.0.1:80",
			map[string][]string{"Forwarded": {`for="[2001:db8:cafe::17]:4711"`}}, "ip:2001:db8:cafe::/64"},
		{"Forwarded quoted IPv4", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`For="192.0.2.60"`}}, "ip:192.0.2.60"},
		{"Forwarded obfuscated port", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`for="192.0.2.60:_abc"`}}, "ip:192.0.2.60"},
		{"Forwarded spoof on the left", fwd, "10.0.0.1:80",
			map[string][]string{"Forwarded": {"for=198.51.100.1, for=192.0.2.60"}}, "ip:192.0.2.60"},
		{"Forwarded two proxies", fwd, "10.0.0.1:80",
			map[string][]string{"Forwarded": {"for=198.51.100.1", "for=192.0.2.60;proto=https, for=10.0.0.2"}}, "ip:192.0.2.60"},
		{"Forwarded empty list elements", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {", for=192.0.2.60 ,"}}, "ip:192.0.2.60"},
		{"Forwarded hidden client left of the client", fwd, "10.0.0.1:80",
			map[string][]string{"Forwarded": {"for=_hidden, for=192.0.2.60"}}, "ip:192.0.2.60"},
		{"Forwarded unknown", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=unknown"}}, ""},
		{"Forwarded obfuscated client", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=_gazonk"}}, ""},
		{"Forwarded without for", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=192.0.2.60, proto=https"}}, ""},
		{"Forwarded unterminated quote", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`for="192.0.2.60, for=203.0.113.7`}}, ""},
		{"Forwarded for twice", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=192.0.2.60;for=203.0.113.7"}}, ""},
		{"Forwarded pair without value", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for"}}, ""},
		{"Forwarded bare IPv6", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=2001:db8::1"}}, ""},
		{"Forwarded quoted unbracketed IPv6", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`for="2001:db8::1"`}}, ""},
		{"Forwarded bracketed IPv4", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`for="[192.0.2.60]"`}}, ""},
		{"Forwarded bad port", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {`for="192.0.2.60:123456"`}}, ""},
		{"Forwarded garbage after element", fwd, "10.0.0.1:80", map[string][]string{"Forwarded": {"for=192.0.2.60 x"}}, ""},
		{"Forwarded ignored without UseForwarded", xff, "10.0.0.1:80",
			map[string][]string{"Forwarded": {"for=198.51.100.1"}, "X-Forwarded-For": {"192.0.2.60"}}, "ip:192.0.2.60"},

		// Addresses and grouping.
		{"IPv6 peer", httplimit.ClientIP{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "ip:2001:db8:1:2::/64"},
		{"IPv6 /56", httplimit.ClientIP{IPv6Prefix: 56}, "[2001:db8:1:2ff::1]:443", nil, "ip:2001:db8:1:200::/56"},
		{"IPv6 /128", httplimit.ClientIP{IPv6Prefix: 128}, "[2001:db8::1]:443", nil, "ip:2001:db8::1"},
		{"IPv4 /24", httplimit.ClientIP{IPv4Prefix: 24}, "203.0.113.7:1", nil, "ip:203.0.113.0/24"},
		{"IPv4 /32", httplimit.ClientIP{IPv4Prefix: 32}, "203.0.113.7:1", nil, "ip:203.0.113.7"},
		{"IPv4-mapped peer", httplimit.ClientIP{}, "[::ffff:203.0.113.7]:1", nil, "ip:203.0.113.7"},
		{"zoned peer", httplimit.ClientIP{IPv6Prefix: 128}, "[fe80::1%eth0]:80", nil, "ip:fe80::1"},
		{"peer without port", httplimit.ClientIP{}, "203.0.113.7", nil, "ip:203.0.113.7"},
		{"Unix socket", httplimit.ClientIP{}, "@", nil, ""},
		{"empty RemoteAddr", httplimit.ClientIP{}, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for k, vs := range tc.header {
				r.Header[k] = vs
			}
			if got := tc.ip.Key(r); got != tc.want {
				t.Errorf("Key = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHeaderKey(t *testing.T) {
	t.Parallel()
	key := httplimit.Header("x-api-key")
	r := httptest.NewRequest("GET", "/", nil)
	if got := key(r); got != "" {
		t.Errorf("no header: key %q, want none", got)
	}
	r.Header.Set("X-Api-Key", "")
	if got := key(r); got != "" {
		t.Errorf("empty header: key %q, want none", got)
	}
	r.Header.Set("X-Api-Key", "sk_live_secret")
	got := key(r)
	if want := "header:X-Api-Key:"; !strings.HasPrefix(got, want) || len(got) != len(want)+64 {
		t.Errorf("key %q, want %s and 64 hex digits", got, want)
	}
	if strings.Contains(got, "secret") {
		t.Errorf("key %q contains the secret", got)
	}
	r2 := httptest.NewRequest("GET", "/", nil)
	r2.Header.Set("X-Api-Key", "sk_live_other")
	if key(r2) == got {
		t.Errorf("two secrets share a key")
	}
	r.Header.Set("X-Api-Key", "sk_live_secret")
	if key(r) != got {
		t.Errorf("one secret, two keys")
	}
}
