package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/floodgate-rl/floodgate/config/xds"
	"github.com/floodgate-rl/floodgate/internal/redistest"
	"github.com/floodgate-rl/floodgate/internal/xdstest"
)

// egNodeID and the other eg* values are what Envoy Gateway's managed
// deployment sets (internal/infrastructure/kubernetes/ratelimit/
// resource.go): its node id, the namespace it runs in, and the pod's name
// as the trace's instance id.
const (
	egNodeID     = "envoy-ratelimit"
	egNamespace  = "envoy-gateway-system"
	egInstanceID = "envoy-ratelimit-5b9c7d6f8-x2x7q"
)

// gatewayRateLimitConfig is upstreamYAML as Envoy Gateway pushes it.
func gatewayRateLimitConfig() *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "httproute/default/backend/rule/0", Domain: "gateway", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "client", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 2}},
	}}
}

// egXDS is a run of `ratelimit` as Envoy Gateway starts it with its own xDS
// server and tracing: go-control-plane's xDS server and snapshot cache
// over mutual TLS, holding gatewayRateLimitConfig for egNodeID, and an OTLP
// receiver.
type egXDS struct {
	certs *redistest.Certs
	cp    *xdstest.Server
	recv  *receiver
	env   map[string]string
}

// newEGXDS starts the xDS server and an OTLP receiver of protocol
// (grpc or http/protobuf), and returns Envoy Gateway's environment for
// them: envoyGatewayEnv's with CONFIG_TYPE=GRPC_XDS_SOTW and its xDS
// settings, TLS on gRPC with the certificate it also presents to the xDS
// server, and TRACING_* with OTEL_EXPORTER_OTLP_ENDPOINT.
func newEGXDS(t *testing.T, protocol string) *egXDS {
	t.Helper()
	e := &egXDS{certs: redistest.NewCerts(t)}
	e.cp = startControlPlane(t, e.certs)
	e.cp.Push(egNodeID, "v1", gatewayRateLimitConfig())
	var endpoint string
	e.recv, endpoint = startReceiver(t, protocol)
	e.env = envoyGatewayEnv(t.TempDir(), "")
	for k, v := range map[string]string{
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         e.cp.Addr,
		"CONFIG_GRPC_XDS_NODE_ID":            egNodeID,
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               e.certs.ServerCertFile,
		"GRPC_SERVER_TLS_KEY":                e.certs.ServerKeyFile,
		"GRPC_SERVER_TLS_CA_CERT":            e.certs.CAFile,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    e.certs.ServerCertFile,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     e.certs.ServerKeyFile,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  e.certs.CAFile,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"TRACING_ENABLED":                    "true",
		"TRACING_SERVICE_NAME":               egNodeID,
		"TRACING_SERVICE_NAMESPACE":          egNamespace,
		"TRACING_SERVICE_INSTANCE_ID":        egInstanceID,
		"TRACING_SAMPLING_RATE":              "1.0",
		"OTEL_EXPORTER_OTLP_ENDPOINT":        endpoint,
	} {
		e.env[k] = v
	}
	if protocol == "grpc" {
		e.env["TRACING_EXPORTER_PROTOCOL"] = "grpc"
	}
	return e
}

// check waits for the xDS server to receive the ACK of the config (so it
// is in force: FORCE_START_WITHOUT_INITIAL_CONFIG serves before it), then
// checks what checkRatelimit does, over the gRPC listener's TLS.
func (e *egXDS) check(t *testing.T, in *ratelimitInstance) {
	t.Helper()
	ack, _ := e.cp.Wait(0, "ACK of v1", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "v1" && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
	})
	if id := ack.GetNode().GetId(); id != egNodeID && id != "" {
		t.Errorf("node id %q, want %s (CONFIG_GRPC_XDS_NODE_ID)", id, egNodeID)
	}
	in.grpcTLS = tlsClient(t, e.certs, false)
	checkRatelimit(t, in, "xds")
}

// checkTrace checks, once ratelimit has stopped (and so flushed its
// spans), that the receiver got the decisions' traces: an RLS server span
// over a floodgate.decide span of the pushed domain, from the resource
// TRACING_* describe (with namespace in place of TRACING_SERVICE_NAMESPACE
// when an OTEL_* variable overrides it).
func (e *egXDS) checkTrace(t *testing.T, namespace string) {
	t.Helper()
	spans, _ := e.recv.spans()
	byID := map[string]span{}
	decisions := 0
	for _, s := range spans {
		byID[s.id] = s
	}
	for _, s := range spans {
		if s.name != "floodgate.decide" || s.str("floodgate.domain") != "gateway" {
			continue
		}
		decisions++
		if rpc := byID[s.parent]; rpc.name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" || rpc.kind != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("decision span's parent: %q (kind %v), want the RLS server span", rpc.name, rpc.kind)
		}
		if !slices.Equal(s.strs("floodgate.rule"), []string{"gateway|client"}) {
			t.Errorf("decision span's rule: %q, want gateway|client (the pushed config's)", s.strs("floodgate.rule"))
		}
	}
	// checkRatelimit's three calls, each sampled (TRACING_SAMPLING_RATE=1.0).
	if decisions != 3 {
		t.Errorf("%d decision spans of domain gateway exported, want 3; %d spans in all", decisions, len(spans))
	}
	want := map[string]string{"service.name": egNodeID, "service.namespace": namespace, "service.instance.id": egInstanceID}
	attrs := e.recv.resources()
	if len(attrs) == 0 {
		t.Fatal("no export received")
	}
	for _, got := range attrs {
		for k, v := range want {
			if got[k] != v {
				t.Errorf("resource attribute %s: %q, want %q", k, got[k], v)
			}
		}
	}
}

// resources returns the string attributes of the resource of each
// ResourceSpans received.
func (r *receiver) resources() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			m := map[string]string{}
			for _, a := range rs.GetResource().GetAttributes() {
				m[a.GetKey()] = a.GetValue().GetStringValue()
			}
			out = append(out, m)
		}
	}
	return out
}

// TestRatelimitEnvoyGatewayXDS runs `ratelimit` in process with Envoy
// Gateway's environment for xDS and tracing (the image's run of it is
// TestImageRootfs): it takes the config the xDS server pushes, over mutual
// TLS with the node id, metadata and headers of the CONFIG_GRPC_XDS_*
// settings; decides Envoy's requests by it; and exports their traces over
// OTLP/gRPC (TRACING_EXPORTER_PROTOCOL=grpc) with the resource of
// TRACING_*, but for the attribute an OTEL_* variable sets, which wins.
func TestRatelimitEnvoyGatewayXDS(t *testing.T) {
	e := newEGXDS(t, "grpc")
	e.env["CONFIG_GRPC_XDS_NODE_METADATA"] = "zone=eu-west-1a,gateway=eg"
	e.env["CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"] = "authorization:Bearer xds-t0ken,x-gateway:eg"
	e.env["OTEL_RESOURCE_ATTRIBUTES"] = "service.namespace=from-otel-env"
	// The exporter and the SDK read the process's OTEL_* variables, as
	// the binary's would be.
	for k, v := range e.env {
		if strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, v)
		}
	}
	in, stop := startRatelimit(t, e.env)
	e.check(t, in)

	first, _ := e.cp.Wait(0, "a request with the node", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetNode() != nil })
	md := first.GetNode().GetMetadata().GetFields()
	if first.GetNode().GetId() != egNodeID || md["zone"].GetStringValue() != "eu-west-1a" || md["gateway"].GetStringValue() != "eg" {
		t.Errorf("node %v, want id %s with metadata zone=eu-west-1a, gateway=eg", first.GetNode(), egNodeID)
	}
	streams := e.cp.Streams()
	if len(streams) == 0 || !slices.Equal(streams[0].Get("authorization"), []string{"Bearer xds-t0ken"}) || !slices.Equal(streams[0].Get("x-gateway"), []string{"eg"}) {
		t.Errorf("stream metadata %v, want authorization and x-gateway of CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", streams)
	}

	if code := stop(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, in.stderr)
	}
	e.checkTrace(t, "from-otel-env")
	// Envoy Gateway's environment has one ignored setting that asks for
	// something: PROMETHEUS_MAPPER_YAML.
	if got := strings.Count(in.stderr.String(), "setting ignored"); got != 1 {
		t.Errorf("%d warnings of ignored settings, want 1 (PROMETHEUS_MAPPER_YAML):\n%s", got, in.stderr)
	}
	if !strings.Contains(in.stderr.String(), `sampler="parentbased_traceidratio 1"`) {
		t.Errorf("no log of TRACING_SAMPLING_RATE's sampler; stderr:\n%s", in.stderr)
	}
}

// TestParseUpstreamXDS: CONFIG_TYPE=GRPC_XDS_SOTW's settings become
// serve's -config-xds flags, and the xds.Options fields with no flag land
// on serve's xdsFlags.
func TestParseUpstreamXDS(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CONFIG_TYPE": "grpc_xds_sotw", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": egNodeID,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "MERGE_DOMAIN_CONFIG": "true",
		"CONFIG_GRPC_XDS_NODE_METADATA": "a=1,b:2", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-a:1",
		"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "2s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "3",
		"TRACING_ENABLED": "true",
	}
	m, err := parseUpstream(lookupIn(env))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-config-xds=envoy-gateway:18001", "-config-xds-node=" + egNodeID, "-config-xds-start-without-config=true", "-config-xds-tls=true",
		"-config-xds-tls-ca=/certs/ca.crt", "-config-xds-tls-cert=/certs/tls.crt", "-config-xds-tls-key=/certs/tls.key", "-config-xds-tls-server-name=envoy-gateway",
		"-grpc=0.0.0.0:8081", "-http=0.0.0.0:8080", "-log-level=warn", "-merge-domain-config=true", "-otel=true", "-response-headers=false", "-ui=false"}
	if !slices.Equal(m.args, want) {
		t.Errorf("args:\n got %q\nwant %q", m.args, want)
	}
	c, code, ok := parseServe(m.args, io.Discard)
	if !ok {
		t.Fatalf("parseServe(%q): exit %d", m.args, code)
	}
	m.configure(&c)
	if c.xds.addr != "envoy-gateway:18001" || c.xds.node != egNodeID || !c.xds.tls() || !c.xds.startWithoutConfig || c.configPath != "" {
		t.Errorf("xds flags %+v, config %q", c.xds, c.configPath)
	}
	if c.xds.nodeMetadata["a"] != "1" || c.xds.nodeMetadata["b"] != "2" || c.xds.headers["x-a"] != "1" || c.xds.maxRecvMsgSize != 8388608 {
		t.Errorf("xds options: metadata %v, headers %v, max message %d", c.xds.nodeMetadata, c.xds.headers, c.xds.maxRecvMsgSize)
	}
	if got, want := c.xds.backoff, (xds.Backoff{Initial: 2 * time.Second, Max: time.Minute, Multiplier: 3}); got != want {
		t.Errorf("backoff %+v, want %+v", got, want)
	}
	if d := m.tracingDefaults(); d.protocol != "http/protobuf" || d.sampler == nil || len(d.attrs) != 2 {
		t.Errorf("tracing defaults %+v, want http/protobuf, a sampler, service.name and a random service.instance.id", d)
	}

	// The TLS files without CONFIG_GRPC_XDS_SERVER_USE_TLS: read by
	// upstream only with it, so plaintext, and each warned.
	delete(env, "CONFIG_GRPC_XDS_SERVER_USE_TLS")
	m, err = parseUpstream(lookupIn(env))
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(m.args, func(a string) bool { return strings.HasPrefix(a, "-config-xds-tls") }) {
		t.Errorf("args %q: TLS without CONFIG_GRPC_XDS_SERVER_USE_TLS", m.args)
	}
	if n := len(m.warnings); n != 4 {
		t.Errorf("%d warnings, want 4 (the TLS files): %q", n, m.warnings)
	}
}

// TestUpstreamBackoff: upstream's XDS_CLIENT_BACKOFF_* (jpillora/backoff's
// Min, Max, Factor, Jitter) in xds.Backoff's terms.
func TestUpstreamBackoff(t *testing.T) {
	t.Parallel()
	const s = time.Second
	for _, c := range []struct {
		name             string
		initial, maxWait time.Duration
		factor           float64
		jitter           bool
		want             xds.Backoff
	}{
		{"upstream's defaults: every wait the initial 10s", 10 * s, 60 * s, 0.5, true, xds.Backoff{Initial: 10 * s, Max: 60 * s, Multiplier: 1, Jitter: -1}},
		{"factor 1", 10 * s, 60 * s, 1, true, xds.Backoff{Initial: 10 * s, Max: 60 * s, Multiplier: 1, Jitter: -1}},
		{"growing, jittered", 1 * s, 60 * s, 2, true, xds.Backoff{Initial: 1 * s, Max: 60 * s, Multiplier: 2}},
		{"growing, not jittered", 1 * s, 60 * s, 1.5, false, xds.Backoff{Initial: 1 * s, Max: 60 * s, Multiplier: 1.5, Jitter: -1}},
		{"zeros are jpillora's defaults", 0, 0, 0, true, xds.Backoff{Initial: 100 * time.Millisecond, Max: 10 * s, Multiplier: 2}},
		{"initial above max: every wait the max", 30 * s, 5 * s, 2, true, xds.Backoff{Initial: 5 * s, Max: 5 * s, Multiplier: 2, Jitter: -1}},
	} {
		if got := upstreamBackoff(c.initial, c.maxWait, c.factor, c.jitter); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// TestTracingDefaults: TRACING_*'s protocol and sampler hold unless an
// OTEL_* variable says otherwise.
func TestTracingDefaults(t *testing.T) {
	t.Parallel()
	m, err := parseUpstream(lookupIn(map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "GRPC", "TRACING_SAMPLING_RATE": "0.25"}))
	if err != nil {
		t.Fatal(err)
	}
	d := m.tracingDefaults()
	for _, c := range []struct {
		env         map[string]string
		protocol    string
		withSampler bool
	}{
		{nil, "grpc", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "http/protobuf", true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_TRACES_SAMPLER": "always_on"}, "http/protobuf", false},
	} {
		protocol, sampler := d.apply(func(k string) string { return c.env[k] })
		if protocol != c.protocol || (sampler != nil) != c.withSampler {
			t.Errorf("%v: protocol %q, sampler %v; want %q, a sampler %v", c.env, protocol, sampler, c.protocol, c.withSampler)
		}
		if sampler != nil && !strings.Contains(sampler.Description(), "TraceIDRatioBased{0.25}") {
			t.Errorf("sampler %s, want ParentBased TraceIDRatioBased{0.25}", sampler.Description())
		}
	}
	// serve's zero value changes nothing.
	if protocol, sampler := (tracingDefaults{}).apply(func(string) string { return "" }); protocol != "http/protobuf" || sampler != nil {
		t.Errorf("zero defaults: %q, %v", protocol, sampler)
	}
	// A random service.instance.id, as upstream's, when unset.
	if id := m.tracing.ServiceInstanceID; len(id) != 36 || id[14] != '4' {
		t.Errorf("service.instance.id %q, want a version 4 UUID", id)
	}
}

// TestParseUpstreamXDSRefused: the xDS and tracing settings that cannot be
// honoured are refused, each named.
func TestParseUpstreamXDSRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway"}, "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x y:1"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=x y:1: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "grpc-timeout:1S"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=grpc-timeout:1S: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c.pem"}, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=c.pem: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "soon"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=soon: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "-1"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR=-1: "},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "-5"}, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES=-5: "},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, "TRACING_EXPORTER_PROTOCOL=zipkin: "},
		{map[string]string{"TRACING_ENABLED": "true", "TRACING_SAMPLING_RATE": "2"}, "TRACING_SAMPLING_RATE=2: "},
		{map[string]string{"TRACING_ENABLED": "true", "OTEL_TRACES_EXPORTER": "none"}, "TRACING_ENABLED=true: OTEL_TRACES_EXPORTER=none"},
		{map[string]string{"TRACING_ENABLED": "true", "OTEL_SDK_DISABLED": "true"}, "TRACING_ENABLED=true: OTEL_SDK_DISABLED=true"},
	} {
		_, err := parseUpstream(lookupIn(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one with %q", c.env, err, c.want)
		}
	}
}
