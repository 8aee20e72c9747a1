package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-rl/floodgate/server/envoyrls"
)

// shopFiles writes domain shop split across two files, as upstream's
// merge_domain_key1.yaml and key2.yaml: quotas with metadata in one, a
// plain rule in the other.
func shopFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"quotas.yaml": `domain: shop
descriptors:
  - key: plan
    value: basic
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {quota: basic}
  - key: plan
    value: premium
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {quota: premium}
`,
		"users.yaml": `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestConfigValidateMerge(t *testing.T) {
	dir := shopFiles(t)
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"config", "validate", dir}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `domain "shop" is already defined`) || !strings.Contains(stderr.String(), "-merge-domain-config") {
		t.Errorf("without merging: exit %d: %s", code, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(t.Context(), []string{"config", "validate", "-merge-domain-config", dir}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ok") {
		t.Errorf("merging: exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	for _, args := range [][]string{{"config", "validate"}, {"config", "validate", "-merge-domain-config"}, {"config", "validate", "-nope", dir}, {"config"}} {
		if code := run(t.Context(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestServeParityFlags(t *testing.T) {
	var stderr strings.Builder
	c, code, ok := parseServe(nil, &stderr)
	if !ok || code != 0 || c.parity.quotaMode || c.parity.dynamicMetadata || c.parity.mergeDomains || c.parity.limitHeaders {
		t.Fatalf("defaults: %+v, %d, %v: upstream's are all off", c.parity, code, ok)
	}
	if c.parity.headerNames != (envoyrls.UpstreamHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}) {
		t.Errorf("default header names %+v", c.parity.headerNames)
	}
	c, _, ok = parseServe([]string{"-quota-mode", "-response-dynamic-metadata", "-merge-domain-config", "-limit-response-headers", "-limit-reset-header", "X-Reset"}, &stderr)
	names := envoyrls.UpstreamHeaders{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "X-Reset"}
	if want := (parityFlags{quotaMode: true, dynamicMetadata: true, mergeDomains: true, limitHeaders: true, headerNames: names}); !ok || c.parity != want {
		t.Errorf("flags: %+v, want %+v", c.parity, want)
	}
	if o := c.parity.envoyOptions(true); !o.DynamicMetadata || o.OmitHeaders || o.UpstreamHeaders == nil || *o.UpstreamHeaders != names {
		t.Errorf("envoy options %+v", o)
	}
	stderr.Reset()
	if _, code, ok := parseServe([]string{"-limit-limit-header", "bad name"}, &stderr); ok || code != 2 || !strings.Contains(stderr.String(), "not a header field name") {
		t.Errorf("bad header name: %d %v %s", code, ok, stderr.String())
	}
	t.Setenv("FLOODGATE_QUOTA_MODE", "true")
	t.Setenv("FLOODGATE_RESPONSE_DYNAMIC_METADATA", "true")
	t.Setenv("FLOODGATE_MERGE_DOMAIN_CONFIG", "true")
	t.Setenv("FLOODGATE_LIMIT_RESPONSE_HEADERS", "true")
	t.Setenv("FLOODGATE_LIMIT_REMAINING_HEADER", "X-Left")
	c, _, ok = parseServe(nil, &stderr)
	names.Reset, names.Remaining = "RateLimit-Reset", "X-Left"
	if want := (parityFlags{quotaMode: true, dynamicMetadata: true, mergeDomains: true, limitHeaders: true, headerNames: names}); !ok || c.parity != want {
		t.Errorf("env: %+v, want %+v", c.parity, want)
	}
}

// TestServeParity runs serve on a domain split across two files with
// -merge-domain-config and -response-dynamic-metadata, and asks it over
// gRPC as Envoy does: the files merge, quotas decide as upstream's, and
// the answer carries the metadata of the quotas passed. Without
// -merge-domain-config serve refuses to start.
func TestServeParity(t *testing.T) {
	dir := shopFiles(t)
	var stdout, stderr strings.Builder
	if code := run(t.Context(), []string{"serve", "-http", "127.0.0.1:0", "-grpc", "", "-config", dir}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "already defined") {
		t.Errorf("split domain without -merge-domain-config: exit %d: %s", code, stderr.String())
	}
	in := startServe(t, "-config", dir, "-merge-domain-config", "-response-dynamic-metadata")
	client := in.rls(t)
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "plan", Value: "basic"}}},
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "plan", Value: "premium"}}},
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "user", Value: "u1"}}},
	}}
	for i, want := range []struct{ overall, quota string }{{"OK", "basic"}, {"OVER_LIMIT", ""}} {
		resp, err := client.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetOverallCode().String(); got != want.overall {
			t.Errorf("request %d: %s, want %s", i, got, want.overall)
		}
		md := resp.GetDynamicMetadata().AsMap()
		if md["domain"] != "shop" {
			t.Errorf("request %d: dynamic metadata %v", i, md)
		}
		got, _ := md["metadata"].(map[string]any)
		if want.quota == "" && got != nil || want.quota != "" && (got == nil || got["quota"] != want.quota) {
			t.Errorf("request %d: metadata %v, want quota %q", i, got, want.quota)
		}
	}
}
