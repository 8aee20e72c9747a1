// Package netkey makes rate limit keys of client addresses, the same way
// for the HTTP and gRPC middleware.
package netkey

import (
	"net/netip"
	"strings"
)

// Key is "ip:" and a, or the network of a when grouped: ipv4Bits and
// ipv6Bits are prefix lengths, 0 meaning 32 for IPv4 and 64 for IPv6, and
// a length at or above the address's own (or below 0) meaning the address
// alone. "ip:203.0.113.7", "ip:203.0.113.0/24", "ip:2001:db8:1:2::/64".
func Key(a netip.Addr, ipv4Bits, ipv6Bits int) string {
	a = a.Unmap().WithZone("")
	bits, all := ipv4Bits, 32
	if a.Is6() {
		bits, all = ipv6Bits, 128
		if bits == 0 {
			bits = 64
		}
	}
	if bits <= 0 || bits >= all {
		return "ip:" + a.String()
	}
	p, _ := a.Prefix(bits) // bits is in range
	return "ip:" + p.String()
}

// ParseHostPort parses an address with or without a port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:80", and
// returns it unmapped and without a zone.
func ParseHostPort(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err2 := netip.ParseAddrPort(s)
		switch {
		case err2 == nil:
			a = ap.Addr()
		case len(s) > 2 && strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"):
			if a, err = netip.ParseAddr(s[1 : len(s)-1]); err != nil || !a.Is6() {
				return netip.Addr{}, false
			}
		default:
			return netip.Addr{}, false
		}
	}
	return a.Unmap().WithZone(""), true
}
