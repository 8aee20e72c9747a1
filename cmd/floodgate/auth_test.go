package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	clientToken = "client-token-0123456789"
	adminToken  = "admin-token-0123456789ab"
)

// TestServeAuth: with token files, the HTTP API's decisions need a client
// or admin token (401 without), reset and config an admin one (403 with a
// client token), probes and metrics none, /readyz keeps its detail for
// admins, every gRPC call but health checks needs a token, and an edit of
// a token file takes effect without a restart.
func TestServeAuth(t *testing.T) {
	dir, _ := writeConfig(t, `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
`)
	tokens := t.TempDir()
	clientFile, adminFile := filepath.Join(tokens, "client"), filepath.Join(tokens, "admin")
	writeFile(t, clientFile, "# client tokens\n"+clientToken+"\n")
	writeFile(t, adminFile, adminToken+"\n")
	in := startServe(t, "-config", dir, "-auth-token-file", clientFile, "-admin-token-file", adminFile)

	allow := `{"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "u1"}]}]}`
	reset := `{"key": "user:42", "limit": {"limit": 2, "period": "1m"}}`
	for _, tc := range []struct {
		method, path, body, token string
		want                      int
	}{
		{"POST", "/v1/allow", allow, "", http.StatusUnauthorized},
		{"POST", "/v1/allow", allow, "not-a-token-of-this-server", http.StatusUnauthorized},
		{"POST", "/v1/allow", allow, clientToken, http.StatusOK},
		{"POST", "/v1/allow", allow, adminToken, http.StatusOK},
		{"POST", "/json", allow, "", http.StatusUnauthorized},
		{"POST", "/v1/reset", reset, clientToken, http.StatusForbidden},
		{"POST", "/v1/reset", reset, "", http.StatusUnauthorized},
		{"POST", "/v1/reset", reset, adminToken, http.StatusNoContent},
		{"GET", "/v1/config", "", clientToken, http.StatusForbidden},
		{"GET", "/v1/config", "", adminToken, http.StatusOK},
		{"GET", "/healthz", "", "", http.StatusOK},
		{"GET", "/readyz", "", "", http.StatusOK},
		{"GET", "/metrics", "", "", http.StatusOK},
	} {
		code, body, hdr := in.do(t, tc.method, tc.path, tc.body, tc.token)
		if code != tc.want {
			t.Errorf("%s %s with token %q: %d %s, want %d", tc.method, tc.path, tc.token, code, body, tc.want)
		}
		if code == http.StatusUnauthorized && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", tc.method, tc.path)
		}
	}

	conn, err := grpc.NewClient(in.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	if _, err := rls.ShouldRateLimit(ctx, rlsRequest("edge", "user", "u2")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ShouldRateLimit without a token: %v, want Unauthenticated", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+clientToken)
	if _, err := rls.ShouldRateLimit(authed, rlsRequest("edge", "user", "u2")); err != nil {
		t.Errorf("ShouldRateLimit with a client token: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health check without a token: %v", err)
	}

	// A new client token replaces the old one without a restart.
	const next = "client-token-rotated-42"
	writeFile(t, clientFile, next+"\n")
	waitUntil(t, 15*time.Second, func() bool {
		code, _, _ := in.do(t, "POST", "/v1/allow", allow, next)
		return code == http.StatusOK
	})
	if code, _, _ := in.do(t, "POST", "/v1/allow", allow, clientToken); code != http.StatusUnauthorized {
		t.Errorf("the replaced token after the reload: %d, want 401", code)
	}
	// A file that no longer loads keeps the tokens in force, and says so.
	writeFile(t, clientFile, "short\n")
	waitUntil(t, 15*time.Second, func() bool { return strings.Contains(in.stderr.String(), "token files not reloaded") })
	if code, _, _ := in.do(t, "POST", "/v1/allow", allow, next); code != http.StatusOK {
		t.Errorf("the token in force after a bad edit: %d, want 200", code)
	}
}

// TestServeAuthBadFile: a token file that does not load stops serve at
// start, naming the file and line.
func TestServeAuthBadFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, f, "# ok\nabc\n")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-auth-token-file", f}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), f+":2") || !strings.Contains(stderr.String(), "at least 16") {
		t.Errorf("serve with a 3-byte token: exit %d, stderr %q; want exit 1 naming %s:2", code, stderr.String(), f)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write a new file and rename it over the old, as an editor or a
	// Secret update does, so that a reload never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// do sends method path with body and, unless empty, a bearer token.
func (in *instance) do(t *testing.T, method, path, body, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, in.httpURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), resp.Header
}

// TestLoopback: the start-up warning about a listener without auth is
// for every address but loopback ones.
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1": true, "127.9.9.9": true, "::1": true, "0.0.0.0": false, "::": false, "10.0.0.1": false} {
		if got := loopback(&net.TCPAddr{IP: net.ParseIP(addr)}); got != want {
			t.Errorf("loopback(%s) = %v, want %v", addr, got, want)
		}
	}
}
