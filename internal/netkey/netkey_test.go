package netkey

import (
	"net/netip"
	"testing"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		addr       string
		ipv4, ipv6 int
		want       string
	}{
		{"203.0.113.7", 0, 0, "ip:203.0.113.7"},
		{"203.0.113.7", 24, 0, "ip:203.0.113.0/24"},
		{"203.0.113.7", 33, 0, "ip:203.0.113.7"},
		{"203.0.113.7", -1, 0, "ip:203.0.113.7"},
		{"::ffff:203.0.113.7", 0, 0, "ip:203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", 0, 0, "ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 0, 48, "ip:2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 0, 128, "ip:2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 0, 128, "ip:fe80::1"},
	} {
		if got := Key(netip.MustParseAddr(tc.addr), tc.ipv4, tc.ipv6); got != tc.want {
			t.Errorf("Key(%s, %d, %d) = %q, want %q", tc.addr, tc.ipv4, tc.ipv6, got, tc.want)
		}
	}
}

func TestParseHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1": "192.0.2.1", "192.0.2.1:80": "192.0.2.1", "2001:db8::1": "2001:db8::1", "[2001:db8::1]": "2001:db8::1",
		"[2001:db8::1]:80": "2001:db8::1", "[::ffff:192.0.2.1]:1": "192.0.2.1", "[fe80::1%eth0]:80": "fe80::1",
		"": "", "@": "", "[192.0.2.1]": "", "example.com:80": "", "192.0.2.1:": "", "[2001:db8::1": "",
	} {
		a, ok := ParseHostPort(in)
		if got := map[bool]string{true: a.String(), false: ""}[ok]; got != want {
			t.Errorf("ParseHostPort(%q) = %q, want %q", in, got, want)
		}
	}
}
