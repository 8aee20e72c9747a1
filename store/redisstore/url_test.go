package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want urlConfig
	}{
		{"redis://localhost", urlConfig{Topology: standalone, Addrs: []string{"localhost:6379"}}},
		{"redis://127.0.0.1:6380/2", urlConfig{Topology: standalone, Addrs: []string{"127.0.0.1:6380"}, DB: 2, dbInPath: true}},
		{"redis://:s3cret@h:1", urlConfig{Topology: standalone, Addrs: []string{"h:1"}, Password: "s3cret"}},
		{"redis://alice:p%40ss%2Fw%3Ard@h:1/0", urlConfig{Topology: standalone, Addrs: []string{"h:1"}, Username: "alice", Password: "p@ss/w:rd", dbInPath: true}},
		{"redis://alice@h", urlConfig{Topology: standalone, Addrs: []string{"h:6379"}, Username: "alice"}},
		{"redis://h?db=3&dial_timeout=2s", urlConfig{Topology: standalone, Addrs: []string{"h:6379"}, DB: 3, DialTimeout: 2 * time.Second}},
		{"REDIS://h", urlConfig{Topology: standalone, Addrs: []string{"h:6379"}}},
		{"redis://[::1]:7000", urlConfig{Topology: standalone, Addrs: []string{"[::1]:7000"}}},
		{"redis://[::1]", urlConfig{Topology: standalone, Addrs: []string{"[::1]:6379"}}},
		{"rediss://u:p@cache.example.com:6380", urlConfig{Topology: standalone, TLS: true, Addrs: []string{"cache.example.com:6380"}, Username: "u", Password: "p"}},
		{"redis-sentinel://s1:26379,s2:26380,s3/mymaster", urlConfig{Topology: sentinel, Addrs: []string{"s1:26379", "s2:26380", "s3:26379"}, Master: "mymaster"}},
		{"redis-sentinel://u:p@s1?master=mymaster&db=1&sentinel_password=sp", urlConfig{Topology: sentinel, Addrs: []string{"s1:26379"}, Master: "mymaster", Username: "u", Password: "p", DB: 1, SentinelPassword: "sp"}},
		{"redis-sentinel://s1/mymaster?master=mymaster&sentinel_username=su", urlConfig{Topology: sentinel, Addrs: []string{"s1:26379"}, Master: "mymaster", SentinelUsername: "su"}},
		{"rediss-sentinel://s1/m", urlConfig{Topology: sentinel, TLS: true, Addrs: []string{"s1:26379"}, Master: "m"}},
		{"redis-cluster://n1:7000", urlConfig{Topology: cluster, Addrs: []string{"n1:7000"}}},
		{"redis-cluster://u:p@n1:7000,n2:7001,[::1]:7002/", urlConfig{Topology: cluster, Addrs: []string{"n1:7000", "n2:7001", "[::1]:7002"}, Username: "u", Password: "p"}},
		{"rediss-cluster://n1:7000/0?dial_timeout=500ms", urlConfig{Topology: cluster, TLS: true, Addrs: []string{"n1:7000"}, DialTimeout: 500 * time.Millisecond}},
		{"redis://h?conn_timeout=5s", urlConfig{Topology: standalone, Addrs: []string{"h:6379"}, ConnTimeout: 5 * time.Second}},
	} {
		got, err := parseURL(tc.url)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.url, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseURL(%q) =\n %+v, want\n %+v", tc.url, got, tc.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"", "no scheme"},
		{"localhost:6379", "no scheme"},
		{"redis:/host:6379", `"redis:" must be followed by "://" (redis://host:6379)`},
		{"rediss-cluster:host", `"rediss-cluster:" must be followed by "://"`},
		{"redis://host:6379/0x", `database "0x" is not a whole number of 0 or more (redis://host:6379/2 selects database 2)`},
		{"http://h", "unknown scheme"},
		{"unix:///tmp/redis.sock", "unknown scheme"},
		{"redis://", "no host"},
		{"redis://u:p@", "no host"},
		{"redis://h1,h2", "takes one host"},
		{"redis://h:0", "port"},
		{"redis://h:65536", "port"},
		{"redis://h:x", "port"},
		{"redis://h:", "port"},
		{"redis://::1", "brackets"},
		{"redis://[::1", "closing"},
		{"redis://[::1]x", "after"},
		{"redis://[h]:1", "only IPv6"},
		{"redis://h,,h2", "empty host"},
		{"redis://h/x", "database"},
		{"redis://h/-1", "database"},
		{"redis://h/1/2", "database"},
		{"redis://h/01", "database"},
		{"redis://h/1?db=2", "both"},
		{"redis://h?db=1&db=2", "2 times"},
		{"redis://h?master=m", "unknown parameter"},
		{"redis://h?dial_timeout=0s", "dial_timeout"},
		{"redis://h?dial_timeout=soon", "dial_timeout"},
		{"redis://h?conn_timeout=-1s", "conn_timeout"},
		{"redis-cluster://h?conn_timeout=x", "conn_timeout"},
		{"redis://h?%zz", "query"},
		{"redis://u:p%zz@h", "password"},
		{"redis://u%zz:p@h", "username"},
		{"redis://h#frag", "'#'"},
		{"redis-sentinel://s1", "no master name"},
		{"redis-sentinel://s1/a/b", "mastername"},
		{"redis-sentinel://s1/a?master=b", "twice"},
		{"redis-cluster://n1/1", "only database 0"},
		{"redis-cluster://n1?db=1", "unknown parameter"},
	} {
		_, err := parseURL(tc.url)
		if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseURL(%q): error %v, want ErrBadURL mentioning %q", tc.url, err, tc.want)
		}
	}
}

// TestParseURLHidesPassword checks that no error repeats a password.
func TestParseURLHidesPassword(t *testing.T) {
	for _, u := range []string{
		"redis://u:hunter2@h:bad",
		"redis://u:hunter2@h1,h2",
		"redis://u:hunter2@h/x",
		"redis:/u:hunter2@h",
		"redis-sentinel://u:hunter2@s1",
		"redis://u:hunter2@h?nope=1",
		"redis-sentinel://s?master=m&sentinel_password=hunter2&x=1",
	} {
		if _, err := parseURL(u); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("parseURL(%q): error %v", u, err)
		}
	}
}

func TestClientOption(t *testing.T) {
	c, err := parseURL("rediss-sentinel://u:p@s1,s2/m?db=2&sentinel_username=su&sentinel_password=sp&dial_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	o := c.clientOption(nil)
	switch {
	case !reflect.DeepEqual(o.InitAddress, []string{"s1:26379", "s2:26379"}):
		t.Errorf("InitAddress %v", o.InitAddress)
	case o.Username != "u" || o.Password != "p" || o.SelectDB != 2:
		t.Errorf("auth and db: %q %q %d", o.Username, o.Password, o.SelectDB)
	case o.Sentinel.MasterSet != "m" || o.Sentinel.Username != "su" || o.Sentinel.Password != "sp":
		t.Errorf("sentinel: %+v", o.Sentinel)
	case o.TLSConfig == nil || o.Sentinel.TLSConfig == nil || o.TLSConfig.ServerName != "":
		t.Errorf("TLS: %+v %+v", o.TLSConfig, o.Sentinel.TLSConfig)
	case o.Dialer.Timeout != 3*time.Second || o.Sentinel.Dialer.Timeout != 3*time.Second:
		t.Errorf("dial timeouts %v %v", o.Dialer.Timeout, o.Sentinel.Dialer.Timeout)
	case o.ForceSingleClient || !o.DisableCache:
		t.Errorf("ForceSingleClient %v, DisableCache %v", o.ForceSingleClient, o.DisableCache)
	}
	c, _ = parseURL("redis://h")
	if o := c.clientOption(nil); !o.ForceSingleClient || o.TLSConfig != nil {
		t.Errorf("redis://: ForceSingleClient %v, TLS %v", o.ForceSingleClient, o.TLSConfig)
	}
}

// TestClientOptionTLS checks that Options.TLS reaches the client and the
// sentinels as a clone, raised to TLS 1.2 only when it left MinVersion 0,
// with the caller's ServerName and no other.
func TestClientOptionTLS(t *testing.T) {
	c, err := parseURL("rediss-sentinel://s1/m")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	custom := &tls.Config{RootCAs: pool}
	o := c.clientOption(custom)
	for name, got := range map[string]*tls.Config{"client": o.TLSConfig, "sentinel": o.Sentinel.TLSConfig} {
		switch {
		case got == nil || got == custom:
			t.Errorf("%s: TLSConfig %p, want a clone of %p", name, got, custom)
		case got.RootCAs != pool:
			t.Errorf("%s: RootCAs not the caller's", name)
		case got.MinVersion != tls.VersionTLS12 || got.ServerName != "":
			t.Errorf("%s: MinVersion %#x, ServerName %q; want TLS 1.2 and none", name, got.MinVersion, got.ServerName)
		}
	}
	if custom.MinVersion != 0 {
		t.Errorf("the caller's configuration changed: MinVersion %#x", custom.MinVersion)
	}
	c, _ = parseURL("rediss-cluster://n1,n2")
	o = c.clientOption(&tls.Config{MinVersion: tls.VersionTLS13, ServerName: "redis.internal"})
	if got := o.TLSConfig; got.MinVersion != tls.VersionTLS13 || got.ServerName != "redis.internal" {
		t.Errorf("cluster: MinVersion %#x, ServerName %q; want the caller's TLS 1.3 and redis.internal", got.MinVersion, got.ServerName)
	}
	c, _ = parseURL("rediss://h")
	if got := c.clientOption(nil).TLSConfig; got == nil || got.MinVersion != tls.VersionTLS12 || got.RootCAs != nil || got.ServerName != "" {
		t.Errorf("default: %+v, want TLS 1.2, the system roots, no ServerName", got)
	}
}

// FuzzParseURL checks that parseURL never panics, that every error wraps
// ErrBadURL, and that what it accepts is usable: at least one address of
// host:port, a master name for Sentinel, and no database in a Cluster.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://localhost:6379/0",
		"rediss://u:p@h:6380",
		"redis-sentinel://a:1,b:2/mymaster?db=1",
		"redis-cluster://n1:7000,n2:7001",
		"redis://[::1]:6379?dial_timeout=1s",
		"redis://h#x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseURL(s)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("parseURL(%q): error %v does not wrap ErrBadURL", s, err)
			}
			return
		}
		if len(c.Addrs) == 0 {
			t.Fatalf("parseURL(%q): no address", s)
		}
		for _, a := range c.Addrs {
			if i := strings.LastIndexByte(a, ':'); i <= 0 || i == len(a)-1 {
				t.Fatalf("parseURL(%q): address %q is not host:port", s, a)
			}
		}
		if c.Topology == sentinel && c.Master == "" {
			t.Fatalf("parseURL(%q): Sentinel without a master name", s)
		}
		if c.Topology == cluster && c.DB != 0 {
			t.Fatalf("parseURL(%q): Cluster with database %d", s, c.DB)
		}
		if c.DB < 0 {
			t.Fatalf("parseURL(%q): database %d", s, c.DB)
		}
		_ = c.clientOption(nil)
	})
}
