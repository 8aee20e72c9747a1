package main

import (
	"bytes"
	"crypto/tls"
	"strings"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/xdstest"
)

// startControlPlane is go-control-plane's xDS server and snapshot cache
// on a loopback port, with mutual TLS.
func startControlPlane(t *testing.T, certs *redistest.Certs) *xdstest.Server {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.ServerCertFile, certs.ServerKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return xdstest.Start(t, credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: certs.Pool()}))
}

func edgeConfig(n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "rl-edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}},
	}}
}

// TestServeXDS: serve -config-xds over mutual TLS takes its config from
// go-control-plane's xDS server: it listens only once the first push is
// applied, decides Envoy's requests by it, refuses a bad push (NACKed,
// counted as a failed reload) and keeps deciding by the last good one,
// and applies the next good push.
func TestServeXDS(t *testing.T) {
	certs := redistest.NewCerts(t)
	cp := startControlPlane(t, certs)
	cp.Push("edge-1", "v1", edgeConfig(2))
	in := startServe(t, "-config-xds", cp.Addr, "-config-xds-node", "edge-1", "-config-xds-cluster", "edge",
		"-config-xds-tls-ca", certs.CAFile, "-config-xds-tls-cert", certs.ClientCertFile, "-config-xds-tls-key", certs.ClientKeyFile)
	first, _ := cp.Wait(0, "first request", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetNode() != nil })
	if n := first.GetNode(); n.GetId() != "edge-1" || n.GetCluster() != "edge" {
		t.Errorf("node %v, want edge-1 of cluster edge", n)
	}
	rls := in.rls(t)
	decide := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rls.ShouldRateLimit(t.Context(), rlsRequest("edge", "remote_address", "10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetOverallCode()
	}
	// Serving means v1 is applied: no wait.
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := decide(); got != want {
			t.Errorf("v1 request %d: %v, want %v", i+1, got, want)
		}
	}
	if got := in.metric(t, `floodgate_config_reloads_total{result="success"}`); got != 1 {
		t.Errorf("reloads success %d, want 1", got)
	}

	bad := edgeConfig(10)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	cp.Push("edge-1", "v2", bad)
	nack, _ := cp.Wait(0, "NACK of v2", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "rl-edge: descriptors[0].rate_limit.unit: missing unit") || nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK %q at version %q, want the missing unit at v1", msg, nack.GetVersionInfo())
	}
	if got := in.metric(t, `floodgate_config_reloads_total{result="failure"}`); got != 1 {
		t.Errorf("reloads failure %d, want 1", got)
	}
	if got := decide(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("after the NACK: %v, want OVER_LIMIT by v1's limit of 2", got)
	}

	cp.Push("edge-1", "v3", edgeConfig(5))
	cp.Wait(0, "ACK of v3", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "v3" && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
	})
	if got := decide(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("v3 (5 a minute), request 4: %v, want OK", got)
	}
	if !strings.Contains(in.stderr.String(), "xds push refused (NACK)") {
		t.Errorf("no log line of the NACK; stderr:\n%s", in.stderr)
	}
}

func TestServeXDSFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-config-xds", "127.0.0.1:1", "-config", "x.yaml"}, "-config and -config-xds: give one"},
		{[]string{"-config-xds-tls"}, "-config-xds-*: needs -config-xds"},
		{[]string{"-config-xds", "127.0.0.1:1", "-config-xds-tls-cert", "c.pem"}, "-config-xds-tls-cert and -config-xds-tls-key: give both"},
		{[]string{"-config-xds", "127.0.0.1:1", "-config-xds-node", ""}, "-config-xds-node: empty"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), append([]string{"serve"}, c.args...), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	// A CA file that is not one is named at start.
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-config-xds", "127.0.0.1:1", "-config-xds-tls-ca", "/nonexistent/ca.pem"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "-config-xds-tls-ca") {
		t.Errorf("bad CA file: exit %d, stderr %q", code, stderr.String())
	}
}
