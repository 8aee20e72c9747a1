package config

import (
	"slices"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		domain  string
		entries []Entry
		want    string
	}{
		{"sms", e("recipient", "2065550100"), "sms|recipient=2065550100"},
		{"sms", e("category", "promotional", "recipient", "2065550100"), "sms|category=promotional|recipient=2065550100"},
		{"paths", e("path", "/api/v1"), "paths|path=/api/v1"},
		{"d", e("k", ""), "d|k="},
		{"d", nil, "d"},
		{"a|b", e("k=1", "v|2%"), "a%7Cb|k%3D1=v%7C2%25"},
		{"d", e("k", "naïve {tag}:x"), "d|k=naïve {tag}:x"},
	} {
		if got := Key(tc.domain, tc.entries); got != tc.want {
			t.Errorf("Key(%q, %v) = %q, want %q", tc.domain, tc.entries, got, tc.want)
		}
	}
}

// TestKeyPerValue pins what the counter is for each kind of match: every
// distinct request value has its own, but for a wildcard with
// share_threshold.
func TestKeyPerValue(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	for _, tc := range []struct {
		domain string
		a, b   []Entry
		same   bool
	}{
		{"sms", e("recipient", "1"), e("recipient", "2"), false},
		{"sms", e("category", "promotional", "recipient", "1"), e("category", "promotional", "recipient", "2"), false},
		{"paths", e("path", "/api/a"), e("path", "/api/b"), false},
		{"paths", e("bucket", "reports/q1.pdf"), e("bucket", "reports/q2.pdf"), true},
		{"db_ops", e("table", "orders"), e("table", "orders"), true},
	} {
		ra, rb := c.Match(tc.domain, tc.a), c.Match(tc.domain, tc.b)
		if ra == nil || ra != rb {
			t.Fatalf("%v and %v should match one rule, got %v and %v", tc.a, tc.b, ra, rb)
		}
		ka, kb := ra.Key(tc.a), rb.Key(tc.b)
		if (ka == kb) != tc.same {
			t.Errorf("keys %q and %q: same = %v, want %v", ka, kb, ka == kb, tc.same)
		}
		if got := string(ra.AppendKey([]byte("x")[:0], tc.a)); got != ka {
			t.Errorf("AppendKey = %q, Key = %q", got, ka)
		}
	}
	r := c.Match("paths", e("bucket", "reports/q1.pdf"))
	if got, want := r.Key(e("bucket", "reports/q1.pdf")), "paths|bucket=reports/*"; got != want {
		t.Errorf("shared wildcard key %q, want %q", got, want)
	}
}

func TestKeyAllocatesOnce(t *testing.T) {
	c := loadTestdata(t)
	entries := e("category", "promotional", "recipient", "2065550100")
	r := c.Match("sms", entries)
	if n := testing.AllocsPerRun(100, func() { _ = r.Key(entries) }); n != 1 {
		t.Errorf("Key allocates %v times, want 1", n)
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = r.AppendKey(buf[:0], entries) }); n != 0 {
		t.Errorf("AppendKey allocates %v times, want 0", n)
	}
}

func TestMetricKey(t *testing.T) {
	t.Parallel()
	c := loadTestdata(t)
	for _, tc := range []struct {
		domain  string
		entries []Entry
		want    string
	}{
		{"sms", e("category", "promotional", "recipient", "2065550100"), "sms.category_promotional.recipient"},
		{"sms", e("recipient", "2065550100"), "sms.recipient"},
		{"tenants", e("tenant", "initech"), "tenants.tenant_initech"},                   // detailed_metric
		{"tenants", e("tenant", "acme"), "tenants.tenant_acme"},                         // a listed value
		{"tenants", e("region", "eu", "tenant", "initech"), "tenants.region_eu.tenant"}, // value_to_metric on region only
		{"paths", e("path", "/api/orders"), "paths.path_/api/*"},
	} {
		r := c.Match(tc.domain, tc.entries)
		if r == nil {
			t.Fatalf("no rule for %v", tc.entries)
		}
		if got := r.MetricKey(tc.entries); got != tc.want {
			t.Errorf("MetricKey(%v) = %q, want %q", tc.entries, got, tc.want)
		}
	}
}

// unescapeKey splits a key back into its parts, for the fuzz test.
func unescapeKey(t *testing.T, key string) []string {
	t.Helper()
	var parts []string
	for _, seg := range strings.Split(key, "|") {
		for _, p := range strings.SplitN(seg, "=", 2) {
			var b strings.Builder
			for i := 0; i < len(p); i++ {
				if p[i] == '%' {
					if i+2 >= len(p) {
						t.Fatalf("key %q: truncated escape", key)
					}
					b.WriteByte(unhex(p[i+1])<<4 | unhex(p[i+2]))
					i += 2
					continue
				}
				b.WriteByte(p[i])
			}
			parts = append(parts, b.String())
		}
	}
	return parts
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

// FuzzKey checks that keys are unambiguous: a key splits back into exactly
// the domain, keys and values it was made of.
func FuzzKey(f *testing.F) {
	f.Add("sms", "recipient", "2065550100", "x", "y")
	f.Add("a|b", "k=1", "v|2%", "", "")
	f.Add("%7C", "|", "=", "%", "%25")
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string) {
		entries := []Entry{{k1, v1}, {k2, v2}}
		key := Key(domain, entries)
		if got, want := unescapeKey(t, key), []string{domain, k1, v1, k2, v2}; !slices.Equal(got, want) {
			t.Fatalf("Key(%q, %q) = %q, which splits into %q", domain, entries, key, got)
		}
	})
}
