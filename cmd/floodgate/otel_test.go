package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// receiver is an OTLP trace receiver on loopback: a gRPC collector
// service or an HTTP handler of /v1/traces, keeping what it is sent.
type receiver struct {
	mu      sync.Mutex
	reqs    []*collectorpb.ExportTraceServiceRequest
	headers []string // the x-test header of each export
	collectorpb.UnimplementedTraceServiceServer
}

func (r *receiver) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.keep(req, strings.Join(md.Get("x-test"), ","))
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) keep(req *collectorpb.ExportTraceServiceRequest, header string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	r.headers = append(r.headers, header)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.keep(&m, req.Header.Get("X-Test"))
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// startReceiver starts a receiver of protocol (grpc or http/protobuf)
// on a loopback port until the test ends, and returns its endpoint URL.
func startReceiver(t *testing.T, protocol string) (*receiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{}
	if protocol == "grpc" {
		g := grpc.NewServer()
		collectorpb.RegisterTraceServiceServer(g, r)
		go g.Serve(ln)
		t.Cleanup(g.Stop)
	} else {
		s := &http.Server{Handler: r}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
	}
	return r, "http://" + ln.Addr().String()
}

// span is an exported span, flattened.
type span struct {
	name, trace, id, parent string
	kind                    tracepb.Span_SpanKind
	status                  tracepb.Status_StatusCode
	attrs                   map[string]*commonpb.AnyValue
}

func (s span) str(key string) string { return s.attrs[key].GetStringValue() }

func (s span) strs(key string) []string {
	var out []string
	for _, v := range s.attrs[key].GetArrayValue().GetValues() {
		out = append(out, v.GetStringValue())
	}
	return out
}

// spans returns every span received, and the service.name of each
// export's resources.
func (r *receiver) spans() (spans []span, services []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range r.reqs {
		for _, rs := range req.GetResourceSpans() {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					services = append(services, a.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s := span{name: sp.GetName(), trace: hex.EncodeToString(sp.GetTraceId()), id: hex.EncodeToString(sp.GetSpanId()),
						parent: hex.EncodeToString(sp.GetParentSpanId()), kind: sp.GetKind(), status: sp.GetStatus().GetCode(),
						attrs: map[string]*commonpb.AnyValue{}}
					for _, a := range sp.GetAttributes() {
						s.attrs[a.GetKey()] = a.GetValue()
					}
					spans = append(spans, s)
				}
			}
		}
	}
	return spans, services
}

const otelYAML = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 5
`

// TestServeExportsTraces runs floodgate serve with the OTEL_* variables
// pointing at an in-process OTLP receiver, over each protocol, and sends
// it an Envoy RLS call, an HTTP decision and a durable reservation with
// its commit, each with a W3C traceparent. The receiver must get a
// server span per call, child of the caller's span; under it the
// decision or reservation with the domain, rule, algorithm and outcome;
// under that the store's call, and the ledger's read and write; the
// service name of OTEL_SERVICE_NAME and the header of
// OTEL_EXPORTER_OTLP_HEADERS; and no value of any request anywhere:
// descriptor values, tokens, the reservation's id, the idempotency key.
func TestServeExportsTraces(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			recv, endpoint := startReceiver(t, protocol)
			if protocol == "grpc" {
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
			} else {
				t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint+"/v1/traces")
				t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
			}
			t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-test=from-env")
			t.Setenv("OTEL_SERVICE_NAME", "floodgate-otel-test")
			exportedSpans(t, recv)
		})
	}
}

func exportedSpans(t *testing.T, recv *receiver) {
	const (
		userValue    = "secret-user-7f3a91"
		tenantValue  = "secret-tenant-c0ffee"
		clientToken  = "secret-token-0123456789abcdef"
		idemKey      = "secret-idempotency-5e5e"
		grpcTraceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		grpcParentID = "00f067aa0ba902b7"
		httpTraceID  = "0af7651916cd43dd8448eb211c80319c"
		httpParentID = "b7ad6b7169203331"
		resTraceID   = "11111111111111111111111111111111"
	)
	dir, _ := writeConfig(t, otelYAML)
	if err := os.WriteFile(filepath.Join(dir, "billing.yaml"), []byte(paidYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(clientToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := startServe(t, "-config", dir, "-ledger", filepath.Join(t.TempDir(), "ledger.db"), "-auth-token-file", tokens)

	// Envoy's call, in Envoy's trace.
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+clientToken,
		"traceparent", "00-"+grpcTraceID+"-"+grpcParentID+"-01")
	if _, err := in.rls(t).ShouldRateLimit(ctx, rlsRequest("edge", "remote_address", userValue)); err != nil {
		t.Fatal(err)
	}
	post := func(path, traceparent, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, in.httpURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+clientToken)
		req.Header.Set("Traceparent", traceparent)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/v1/allow", "00-"+httpTraceID+"-"+httpParentID+"-01",
		`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"`+userValue+`"}]}]}`); code != http.StatusOK {
		t.Fatalf("allow: %d %s", code, body)
	}
	code, body := post("/v1/reservations", "00-"+resTraceID+"-"+httpParentID+"-01",
		`{"domain":"billing","descriptors":[{"entries":[{"key":"tenant","value":"`+tenantValue+`"}]}],"hits":30}`, "Idempotency-Key", idemKey)
	var held struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(body), &held); code != http.StatusOK || err != nil || held.ID == "" {
		t.Fatalf("reserve: %d %s", code, body)
	}
	if code, body := post("/v1/reservations/"+held.ID+"/commit", "00-"+resTraceID+"-"+httpParentID+"-01", `{"cost":20}`); code != http.StatusOK {
		t.Fatalf("commit: %d %s", code, body)
	}
	// Stopping serve flushes the spans it holds: no waiting on a timer.
	if code := in.stop(); code != 0 {
		t.Fatalf("serve exited %d; stderr:\n%s", code, in.stderr)
	}

	spans, services := recv.spans()
	if len(services) == 0 || slices.ContainsFunc(services, func(s string) bool { return s != "floodgate-otel-test" }) {
		t.Errorf("service.name of the exports: %q, want floodgate-otel-test (OTEL_SERVICE_NAME)", services)
	}
	recv.mu.Lock()
	headers := slices.Clone(recv.headers)
	recv.mu.Unlock()
	if len(headers) == 0 || slices.ContainsFunc(headers, func(h string) bool { return h != "from-env" }) {
		t.Errorf("x-test header of the exports: %q, want from-env (OTEL_EXPORTER_OTLP_HEADERS)", headers)
	}
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.id] = s
	}
	// find returns the one span named name in trace whose parent is
	// parent.
	find := func(trace, parent, name string) span {
		t.Helper()
		var got []span
		for _, s := range spans {
			if s.trace == trace && s.parent == parent && s.name == name {
				got = append(got, s)
			}
		}
		if len(got) != 1 {
			var all []string
			for _, s := range spans {
				all = append(all, s.name+" "+s.trace+" parent "+s.parent+" id "+s.id)
			}
			t.Fatalf("%d spans %q in trace %s under %s, want 1; got:\n%s", len(got), name, trace, parent, strings.Join(all, "\n"))
		}
		return got[0]
	}
	rpc := find(grpcTraceID, grpcParentID, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if rpc.kind != tracepb.Span_SPAN_KIND_SERVER || rpc.str("rpc.system") != "grpc" || rpc.attrs["rpc.grpc.status_code"].GetIntValue() != 0 {
		t.Errorf("RLS span: kind %v, attributes %v", rpc.kind, rpc.attrs)
	}
	decide := find(grpcTraceID, rpc.id, "floodgate.decide")
	checkDecision(t, decide, "edge", "edge|remote_address", "allowed")
	store := find(grpcTraceID, decide.id, "floodgate.store")
	if store.attrs["floodgate.store.requests"].GetIntValue() != 1 || store.attrs["floodgate.store.failures"].GetIntValue() != 0 {
		t.Errorf("store span attributes: %v", store.attrs)
	}

	api := find(httpTraceID, httpParentID, "POST /v1/allow")
	if api.kind != tracepb.Span_SPAN_KIND_SERVER || api.str("http.route") != "/v1/allow" || api.attrs["http.response.status_code"].GetIntValue() != 200 {
		t.Errorf("HTTP span: kind %v, attributes %v", api.kind, api.attrs)
	}
	checkDecision(t, find(httpTraceID, api.id, "floodgate.decide"), "edge", "edge|remote_address", "allowed")

	reserve := find(resTraceID, find(resTraceID, httpParentID, "POST /v1/reservations").id, "floodgate.reserve")
	checkDecision(t, reserve, "billing", "billing|tenant", "held")
	if got := reserve.attrs["floodgate.cost"].GetArrayValue().GetValues(); len(got) != 1 || got[0].GetIntValue() != 30 {
		t.Errorf("reserve's cost: %v, want [30]", got)
	}
	// A new window of a durable quota: its counter is checked against
	// the ledger, inside the store's call.
	find(resTraceID, find(resTraceID, reserve.id, "floodgate.store").id, "floodgate.ledger.read")
	commitRoute := find(resTraceID, httpParentID, "POST /v1/reservations/{id}/commit")
	if commitRoute.str("http.route") != "/v1/reservations/{id}/commit" {
		t.Errorf("commit's route: %q", commitRoute.str("http.route"))
	}
	commit := find(resTraceID, commitRoute.id, "floodgate.commit")
	if commit.str("floodgate.outcome") != "settled" || commit.attrs["floodgate.actual_cost"].GetIntValue() != 20 ||
		commit.attrs["floodgate.refunded"].GetIntValue() != 10 || commit.attrs["floodgate.billed"].GetIntValue() != 20 {
		t.Errorf("commit span attributes: %v", commit.attrs)
	}
	record := find(resTraceID, commit.id, "floodgate.ledger.record")
	if record.attrs["floodgate.ledger.commits"].GetIntValue() != 1 || record.status == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("ledger record span: status %v, attributes %v", record.status, record.attrs)
	}

	// Three calls of three spans (server, decision, store), the reserve
	// of four (with its ledger read), the commit of three: no other.
	if len(spans) != 13 {
		t.Errorf("%d spans exported, want 13", len(spans))
	}

	// No value of any request, anywhere in what was exported.
	recv.mu.Lock()
	var dump strings.Builder
	for _, req := range recv.reqs {
		dump.WriteString(prototext.Format(req))
	}
	recv.mu.Unlock()
	for _, secret := range []string{userValue, tenantValue, clientToken, idemKey, held.ID} {
		if strings.Contains(dump.String(), secret) {
			t.Errorf("the exported spans hold %q, a value of a request", secret)
		}
	}
	for _, s := range spans {
		for k := range s.attrs {
			if strings.HasPrefix(k, "url.path") || strings.HasPrefix(k, "client.") || strings.HasPrefix(k, "network.peer") || strings.HasPrefix(k, "user_agent") {
				t.Errorf("span %s has attribute %s, which names the request or its client", s.name, k)
			}
		}
	}
}

// checkDecision checks the attributes of a decision's or reservation's
// span of one descriptor.
func checkDecision(t *testing.T, s span, domain, rule, outcome string) {
	t.Helper()
	if s.kind != tracepb.Span_SPAN_KIND_INTERNAL || s.str("floodgate.domain") != domain || s.str("floodgate.outcome") != outcome ||
		!slices.Equal(s.strs("floodgate.rule"), []string{rule}) || !slices.Equal(s.strs("floodgate.algorithm"), []string{"fixed_window"}) ||
		!slices.Equal(s.strs("floodgate.descriptor_outcome"), []string{"allowed"}) {
		t.Errorf("%s span: kind %v, attributes %v", s.name, s.kind, s.attrs)
	}
}
