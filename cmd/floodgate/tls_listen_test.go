package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// tlsClient trusts certs' CA and, when withCert, presents its client
// certificate.
func tlsClient(t *testing.T, certs *redistest.Certs, withCert bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(certs.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(certs.ClientCertFile, certs.ClientKeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

func httpsGet(conf *tls.Config, url string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return resp.StatusCode, fmt.Errorf("%s, want HTTP/2", resp.Proto)
	}
	return resp.StatusCode, nil
}

// TestServeTLS: with -tls-cert and -tls-key both listeners speak TLS only
// (HTTP/2 offered on HTTP); with -tls-client-ca a client without a
// certificate of that CA is refused; and a renewed certificate is served
// without a restart.
func TestServeTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, certs.ServerCertFile, certFile)
	copyFile(t, certs.ServerKeyFile, keyFile)
	in := startServe(t, "-tls-cert", certFile, "-tls-key", keyFile, "-tls-client-ca", certs.CAFile)
	url := strings.Replace(in.httpURL, "http://", "https://", 1) + "/healthz"

	if code, err := httpsGet(tlsClient(t, certs, true), url); err != nil || code != http.StatusOK {
		t.Errorf("GET /healthz over mutual TLS: %d %v", code, err)
	}
	if _, err := httpsGet(tlsClient(t, certs, false), url); err == nil {
		t.Error("GET /healthz without a client certificate: no error, want the handshake refused")
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(in.httpURL + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP GET /healthz on a TLS listener: 200")
		}
	}

	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsClient(t, certs, true))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health check over mutual TLS: %v", err)
	}
	bare, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlsClient(t, certs, false))))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := healthpb.NewHealthClient(bare).Check(t.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("gRPC health check without a client certificate: no error")
	}

	// A renewal by another CA: the server presents it within seconds, and
	// a client that trusts only the new CA gets in (it presents a
	// certificate of the old CA, which -tls-client-ca still names).
	next := redistest.NewCerts(t)
	copyFile(t, next.ServerKeyFile, keyFile)
	copyFile(t, next.ServerCertFile, certFile)
	conf := tlsClient(t, next, false)
	old := tlsClient(t, certs, true)
	conf.Certificates = old.Certificates
	waitUntil(t, 15*time.Second, func() bool {
		code, err := httpsGet(conf, url)
		return err == nil && code == http.StatusOK
	})
}

// TestServeTLSFlags: the TLS flags are checked before anything starts.
func TestServeTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", "c.pem"}, "-tls-cert and -tls-key: give both"},
		{[]string{"-tls-client-ca", "ca.pem"}, "-tls-client-ca: needs -tls-cert"},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), append([]string{"serve"}, tc.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	var stdout, stderr strings.Builder
	missing := filepath.Join(t.TempDir(), "missing.pem")
	if code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-tls-cert", missing, "-tls-key", missing}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "-tls-cert "+missing) {
		t.Errorf("serve with a missing certificate: exit %d, stderr %q", code, stderr.String())
	}
}
