package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redistest"
)

// checkAdmits fails t unless s admits exactly n of n+2 requests on a key
// of its own, for a fixed window, a GCRA and a sliding log of limit n.
func checkAdmits(t *testing.T, name string, s *Store, n int64) {
	t.Helper()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.GCRA, floodgate.SlidingWindowLog} {
		l := limitOf(alg, n, time.Minute)
		var admitted int64
		for range n + 2 {
			d, err := s.Apply(t.Context(), request("tls", l, t0))
			if err != nil {
				t.Fatalf("%s %s: %v", name, alg, err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != n {
			t.Errorf("%s %s: admitted %d of %d, want exactly %d", name, alg, admitted, n+2, n)
		}
	}
}

// openWithin opens url as Open does, and fails t if Open has not returned
// within 10 s: a TLS failure must be an error at once, not a retry until
// the caller's deadline.
func openWithin(t *testing.T, url string, opts *Options) (*Store, error) {
	t.Helper()
	const bound = 10 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*bound)
	defer cancel()
	start := time.Now()
	s, err := Open(ctx, url, opts)
	if took := time.Since(start); took > bound {
		t.Errorf("Open %s took %v, want an answer within %v", url, took, bound)
	}
	if s != nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestTLS opens a redis-server that speaks only TLS and requires client
// certificates: with Options.TLS trusting the test's CA and presenting its
// client certificate it decides as over plain TCP; without the CA, without
// the client certificate, or for another server name, Open fails at once
// and says why.
func TestTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.Standalone(t, redistest.WithTLS(certs, redistest.ClientCertRequired))
	url := "rediss://" + srv.Addr

	s, err := openWithin(t, url, &Options{Prefix: testPrefix(t), TLS: certs.ClientConfig()})
	if err != nil {
		t.Fatalf("Open with the CA and a client certificate: %v", err)
	}
	checkAdmits(t, "Open", s, 3)
	if out := srv.MustCLI(t, "KEYS", s.prefix+":*"); strings.Count(out, "\n")+1 != 3 {
		t.Errorf("the states are not on the TLS server: KEYS = %q", out)
	}

	// A rueidis client built by the application (package goredisstore
	// checks a go-redis one).
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{srv.Addr}, ForceSingleClient: true, DisableCache: true,
		Dialer: net.Dialer{Timeout: testDialTimeout}, TLSConfig: certs.ClientConfig(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	rs, err := New(rc, &Options{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	checkAdmits(t, "rueidis", rs, 3)
	// Options.TLS would do nothing there: the client has its own.
	if _, err := New(rc, &Options{TLS: certs.ClientConfig()}); err == nil || !strings.Contains(err.Error(), "Options.TLS") {
		t.Errorf("New with Options.TLS: %v, want an error naming Options.TLS", err)
	}

	named := certs.ClientConfig()
	named.ServerName = "localhost"
	if s, err := openWithin(t, url, &Options{TLS: named}); err != nil {
		t.Errorf("Open with ServerName localhost, a name of the certificate: %v", err)
	} else if _, err := s.Apply(t.Context(), request("tls", limitOf(floodgate.GCRA, 1, time.Minute), t0)); err != nil {
		t.Errorf("Apply with ServerName localhost: %v", err)
	}

	// What Redis answers a certificate it does not trust varies with the
	// TLS version and OpenSSL's alert; it must fail, whatever it says.
	strangerConf := redistest.NewCerts(t).ClientConfig()
	strangerConf.RootCAs = certs.Pool()
	for _, tc := range []struct {
		name string
		conf *tls.Config
		// check, if set, tells whether err is the expected failure.
		check func(err error) bool
		want  string // in the message
	}{
		{"system roots", nil, isUnknownAuthority, "certificate signed by unknown authority"},
		{"another CA", &tls.Config{RootCAs: redistest.NewCerts(t).Pool(), Certificates: certs.ClientConfig().Certificates}, isUnknownAuthority, "certificate signed by unknown authority"},
		{"no client certificate", &tls.Config{RootCAs: certs.Pool()}, nil, "the server asked for a TLS client certificate, and none was configured"},
		{"client certificate of another CA", strangerConf, nil, ""},
		{"wrong server name", &tls.Config{RootCAs: certs.Pool(), Certificates: certs.ClientConfig().Certificates, ServerName: "redis.example"}, isHostnameError, "not redis.example"},
	} {
		_, err := openWithin(t, url, &Options{TLS: tc.conf})
		if err == nil {
			t.Errorf("%s: Open succeeded", tc.name)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
		if (tc.check != nil && !tc.check(err)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Open failed with %v, want an error saying %q", tc.name, err, tc.want)
		}
		if !strings.Contains(err.Error(), srv.Addr) {
			t.Errorf("%s: the error %q does not name the server", tc.name, err)
		}
	}
}

func isUnknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua)
}

func isHostnameError(err error) bool {
	var he x509.HostnameError
	return errors.As(err, &he)
}

// TestTLSOptionErrors checks that Open refuses Options.TLS with a URL
// without TLS, where it would do nothing.
func TestTLSOptionErrors(t *testing.T) {
	conf := &tls.Config{}
	for _, u := range []string{"redis://127.0.0.1:1", "redis-sentinel://127.0.0.1:1/m", "redis-cluster://127.0.0.1:1"} {
		// The port is closed: a check made after dialling would fail on
		// the connection instead.
		if _, err := Open(t.Context(), u, &Options{TLS: conf}); err == nil || !strings.Contains(err.Error(), "Options.TLS") {
			t.Errorf("Open %s with Options.TLS: %v, want an error naming Options.TLS", u, err)
		}
	}
}

// TestTLSOptionalClientCert opens a TLS server that asks for a client
// certificate but does not require one (tls-auth-clients optional) and
// requires a password: without a certificate and with the right password
// Open works; with a wrong one its error is Redis's WRONGPASS, without the
// note about a missing certificate, which would send the reader the wrong
// way.
func TestTLSOptionalClientCert(t *testing.T) {
	certs := redistest.NewCerts(t)
	srv := redistest.Standalone(t, redistest.WithTLS(certs, redistest.ClientCertOptional), redistest.WithPassword("s3cret"))
	conf := &tls.Config{RootCAs: certs.Pool()}
	if _, err := openWithin(t, "rediss://:s3cret@"+srv.Addr, &Options{TLS: conf}); err != nil {
		t.Fatalf("without a client certificate, the right password: %v", err)
	}
	_, err := openWithin(t, "rediss://:wrong@"+srv.Addr, &Options{TLS: conf})
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "client certificate") {
		t.Errorf("a wrong password: %v, want WRONGPASS and no word of a client certificate", err)
	}
}

// TestTLSCluster runs the store on a Redis Cluster whose nodes speak only
// TLS, to clients and on the cluster bus: Open of rediss-cluster:// with
// Options.TLS (no ServerName, so each node is verified by its own address)
// reaches every master.
func TestTLSCluster(t *testing.T) {
	certs := redistest.NewCerts(t)
	cl := redistest.StartCluster(t, redistest.WithNodeOptions(redistest.WithTLS(certs, redistest.ClientCertRequired)))
	prefix := testPrefix(t)
	u := "rediss-cluster://" + strings.Join(cl.Addrs(), ",") + "?dial_timeout=" + testDialTimeout.String()
	s, err := openWithin(t, u, &Options{Prefix: prefix, TLS: certs.ClientConfig()})
	if err != nil {
		t.Fatal(err)
	}
	checkAdmits(t, "cluster", s, 3)
	l := limitOf(floodgate.GCRA, 10, time.Minute)
	for i := range 100 {
		if _, err := s.Apply(t.Context(), request(fmt.Sprintf("user:%d", i), l, time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range cl.Masters {
		if n := strings.Count(m.MustCLI(t, "KEYS", prefix+":*"), "\n") + 1; n < 10 {
			t.Errorf("master %s holds %d of 103 keys", m.Addr, n)
		}
	}
	start := time.Now()
	_, err = openWithin(t, u, &Options{TLS: &tls.Config{RootCAs: certs.Pool()}})
	if err == nil {
		t.Fatal("Open of the cluster without a client certificate succeeded")
	}
	t.Logf("without a client certificate, after %v: %v", time.Since(start), err)
	if want := "the server asked for a TLS client certificate"; !strings.Contains(err.Error(), want) {
		t.Errorf("Open of the cluster without a client certificate: %v, want an error saying %q", err, want)
	}
}

// TestTLSSentinel opens rediss-sentinel:// with Options.TLS: the
// sentinels and the master speak only TLS and require client
// certificates, so Open reaches both with it.
func TestTLSSentinel(t *testing.T) {
	certs := redistest.NewCerts(t)
	// No failover is wanted here: a long down-after keeps a stall of the
	// loaded machine from causing one.
	d := redistest.StartSentinel(t, redistest.WithSentinelTLS(certs), redistest.WithDownAfter(time.Minute))
	u := "rediss-sentinel://" + strings.Join(d.SentinelAddrs(), ",") + "/" + d.MasterName + "?dial_timeout=" + testDialTimeout.String()
	prefix := testPrefix(t)
	s, err := openWithin(t, u, &Options{Prefix: prefix, TLS: certs.ClientConfig()})
	if err != nil {
		t.Fatal(err)
	}
	checkAdmits(t, "sentinel", s, 3)
	if n := strings.Count(d.Master.MustCLI(t, "KEYS", prefix+":*"), "\n") + 1; n != 3 {
		t.Errorf("the master holds %d keys of the test, want 3", n)
	}
	if _, err := openWithin(t, u, &Options{TLS: &tls.Config{RootCAs: certs.Pool()}}); err == nil || !strings.Contains(err.Error(), "asked for a TLS client certificate") {
		t.Errorf("Open without a client certificate: %v, want an error saying the server asked for one", err)
	}
}
