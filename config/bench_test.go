package config

import (
	"fmt"
	"strings"
	"testing"
)

// bigConfig is a domain of n exact values, n/100 wildcards and a key-only
// default under one key, and as many two-level rules.
func bigConfig(n int) string {
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: user, value: u%d, rate_limit: {unit: minute, requests_per_unit: %d}}\n", i, i+1)
		fmt.Fprintf(&b, "  - {key: org, value: o%d, descriptors: [{key: user, rate_limit: {unit: second, requests_per_unit: 5}}]}\n", i)
	}
	for i := range n / 100 {
		fmt.Fprintf(&b, "  - {key: user, value: \"team%d-*\", rate_limit: {unit: minute, requests_per_unit: 7}}\n", i)
	}
	b.WriteString("  - {key: user, rate_limit: {unit: minute, requests_per_unit: 60}}\n")
	return b.String()
}

func BenchmarkMatch(b *testing.B) {
	c := loadTestdata(b)
	big, err := Parse("big.yaml", []byte(bigConfig(10000)))
	if err != nil {
		b.Fatal(err)
	}
	bigC, err := New(big)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name    string
		c       *Config
		domain  string
		entries []Entry
	}{
		{"rules=small/kind=exact/depth=1", c, "db_ops", e("table", "orders")},
		{"rules=small/kind=keyonly/depth=1", c, "edge_per_client", e("client_ip", "198.51.100.7")},
		{"rules=small/kind=wildcard/depth=1", c, "paths", e("path", "/api/search?q=shoes")},
		{"rules=small/kind=keyonly/depth=2", c, "sms", e("category", "promotional", "recipient", "2065550100")},
		{"rules=small/kind=miss/depth=1", c, "db_ops", e("table", "users")},
		{"rules=20k/kind=exact/depth=1", bigC, "big", e("user", "u4242")},
		{"rules=20k/kind=wildcard/depth=1", bigC, "big", e("user", "team42-alice")},
		{"rules=20k/kind=keyonly/depth=1", bigC, "big", e("user", "someone")},
		{"rules=20k/kind=keyonly/depth=2", bigC, "big", e("org", "o4242", "user", "someone")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.c.Match(bc.domain, bc.entries) == nil && !strings.Contains(bc.name, "miss") {
				b.Fatal("no match")
			}
			b.ReportAllocs()
			for b.Loop() {
				bc.c.Match(bc.domain, bc.entries)
			}
		})
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	c := loadTestdata(b)
	entries := e("category", "promotional", "recipient", "2065550100")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Match("sms", entries)
		}
	})
}

func BenchmarkMatchAll(b *testing.B) {
	c := loadTestdata(b)
	for _, bc := range []struct {
		name        string
		domain      string
		descriptors [][]Entry
	}{
		{"descriptors=2/replaces=no", "sms", [][]Entry{
			e("category", "promotional", "recipient", "2065550100"), e("recipient", "2065550100")}},
		{"descriptors=2/replaces=yes", "api_tiers", [][]Entry{
			e("tier", "standard", "user", "alice"), e("endpoint", "export", "user", "alice")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.MatchAll(bc.domain, bc.descriptors)
			}
		})
	}
}

func BenchmarkKey(b *testing.B) {
	c := loadTestdata(b)
	entries := e("category", "promotional", "recipient", "2065550100")
	r := c.Match("sms", entries)
	b.Run("Key", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = r.Key(entries)
		}
	})
	b.Run("AppendKey", func(b *testing.B) {
		buf := make([]byte, 0, 128)
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendKey(buf[:0], entries)
		}
	})
}

// BenchmarkParse measures a reload: 20k rules in one 1.3 MB file.
func BenchmarkParse(b *testing.B) {
	data := []byte(bigConfig(10000))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("big.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseHostile measures what a small hostile file can cost: alias
// bombs stopped by the problem cap (duplicates) and by the node budget
// (distinct descriptors).
func BenchmarkParseHostile(b *testing.B) {
	var dup strings.Builder
	dup.WriteString("l0: &l0 {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&dup, "l%d: &l%d {key: k, descriptors: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	dup.WriteString("domain: bomb\ndescriptors: [*l8]\n")
	for _, bc := range []struct{ name, data string }{
		{"input=duplicate-bomb", dup.String()},
		{"input=wide-bomb", wideBomb()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse("bomb.yaml", []byte(bc.data)); err == nil {
					b.Fatal("no error")
				}
			}
		})
	}
}
