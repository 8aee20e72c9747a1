// Package tracing makes the OpenTelemetry spans of `floodgate serve`:
// one per decision, reservation step, ledger transaction and quota
// report, under a server span per call of the HTTP API and of Envoy's
// gRPC services that continues the caller's W3C trace context
// (traceparent). docs/tracing.md lists every span and attribute.
//
// Nothing a request brings becomes an attribute: no descriptor value, no
// store key, no token or reservation id, no client address, no URL path
// (which holds ids). A span names the domain (or "_unknown" for one the
// config lacks, as the metrics do), the rules from the config, the
// algorithm, the cost, the outcome, and the time the store took.
//
// A nil *Tracer is tracing off: every method is safe on it, and the
// callers in server, server/httpapi, server/envoyrls and server/rlqs check
// for nil before they make anything, so that a server without tracing
// pays a nil check per request and allocates nothing for it.
package tracing

import (
	"context"
	"errors"
	"net/http"

	"github.com/floodgate-rl/floodgate"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
)

// ScopeName is the instrumentation scope of every span.
const ScopeName = "github.com/floodgate-rl/floodgate"

// Span names.
const (
	// SpanDecide is one decision of a request's descriptors
	// (server.Server.Decide, DecideInline).
	SpanDecide = "floodgate.decide"
	// SpanReserve is one reservation of a request's descriptors
	// (server.Server.Reserve, ReserveInline).
	SpanReserve = "floodgate.reserve"
	// SpanCommit and SpanCancel are the settling steps of a reservation.
	SpanCommit = "floodgate.commit"
	SpanCancel = "floodgate.cancel"
	// SpanStore is the Limiter's call of the store, a child of a decision
	// or a reservation: one round trip to the store (Redis: one pipeline
	// or script) with the failure policy's answer, or the local store's
	// decision.
	SpanStore = "floodgate.store"
	// SpanLedgerRecord is one write of a commit to the ledger of durable
	// quotas (one transaction, which concurrent commits may share: group
	// commit); SpanLedgerRead one read of a window's units.
	SpanLedgerRecord = "floodgate.ledger.record"
	SpanLedgerRead   = "floodgate.ledger.read"
	// SpanRLQSReport is one usage report on an Envoy's quota stream.
	SpanRLQSReport = "floodgate.rlqs.report"
)

// Attribute keys of Floodgate's spans; the edge spans also use the
// OpenTelemetry semantic conventions' (http.*, rpc.*, error.type).
const (
	// KeyDomain is the request's domain when the config has it,
	// "_unknown" when it does not, "" for an inline limit.
	KeyDomain = attribute.Key("floodgate.domain")
	// KeyOutcome is a step's overall answer: allowed, denied or invalid
	// for a decision; held, denied or invalid for a reserve; settled,
	// replayed, billed_lost, expired or failed for a commit or cancel.
	KeyOutcome = attribute.Key("floodgate.outcome")
	// KeyDescriptors is the number of descriptors of the request.
	KeyDescriptors = attribute.Key("floodgate.descriptors")
	// KeyRule, KeyAlgorithm, KeyCost and KeyDescriptorOutcome hold one
	// element per descriptor, in the request's order: the rule's ID
	// ("" for no rule, "inline" for an inline limit, "override" for
	// Envoy's limit override), its algorithm ("" when not limited), the
	// units asked, and the descriptor's outcome, the label of
	// floodgate_decisions_total (allowed, denied, other_denied,
	// shadow_denied, failed_open, failed_closed, ledger_failed,
	// local_allowed, local_denied) or no_rule, unlimited, replaced.
	KeyRule              = attribute.Key("floodgate.rule")
	KeyAlgorithm         = attribute.Key("floodgate.algorithm")
	KeyCost              = attribute.Key("floodgate.cost")
	KeyDescriptorOutcome = attribute.Key("floodgate.descriptor_outcome")
	// KeyGlobalShadow is set on a decision that global shadow mode
	// answered OK although its limits denied it.
	KeyGlobalShadow = attribute.Key("floodgate.global_shadow")
	// KeyStoreRequests is the requests sent to the store in one call;
	// KeyStoreFailures those the store failed (answered by their failure
	// policy).
	KeyStoreRequests = attribute.Key("floodgate.store.requests")
	KeyStoreFailures = attribute.Key("floodgate.store.failures")
	// KeyActualCost is the cost a commit settles (0 for a cancel);
	// KeyRefunded the units it gave back (the hold above the cost),
	// KeyCharged those it took above the hold, KeyBilled those the
	// ledger of durable quotas holds for it, summed over the keys of the
	// reservation (floodgate.Settlement).
	KeyActualCost = attribute.Key("floodgate.actual_cost")
	KeyRefunded   = attribute.Key("floodgate.refunded")
	KeyCharged    = attribute.Key("floodgate.charged")
	KeyBilled     = attribute.Key("floodgate.billed")
	// KeyLedgerCommits is the commits of one ledger write.
	KeyLedgerCommits = attribute.Key("floodgate.ledger.commits")
	// KeyBuckets is the buckets of one quota report.
	KeyBuckets = attribute.Key("floodgate.rlqs.buckets")
	// KeyErrorType is the kind of a failure (semantic conventions'
	// error.type): deadline_exceeded, canceled, invalid or _OTHER; never
	// the error's text, which may hold a key.
	KeyErrorType = attribute.Key("error.type")
)

// Tracer makes Floodgate's spans from a TracerProvider. A nil *Tracer
// makes none. It is safe for concurrent use.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// New returns a Tracer of tp whose server spans continue the trace
// context that prop extracts from the caller's headers (nil: W3C Trace
// Context). A nil tp is tracing off: New returns nil.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator) *Tracer {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{t: tp.Tracer(ScopeName), prop: prop}
}

// Start starts an internal span named name, a child of ctx's span.
func (t *Tracer) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	return t.t.Start(ctx, name)
}

// HTTP wraps h, the handler of route (a pattern of net/http's ServeMux,
// "POST /v1/allow"), in a server span named route that continues the
// caller's trace context. The span says the method, the route and the
// status code, never the path (which holds ids) nor the client.
func (t *Tracer) HTTP(route string, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	method, path := "", route
	for i := 0; i < len(route); i++ {
		if route[i] == ' ' {
			method, path = route[:i], route[i+1:]
			break
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.t.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		if !span.IsRecording() {
			h.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		span.SetAttributes(attribute.String("http.request.method", method), attribute.String("http.route", path),
			attribute.String("url.scheme", scheme(r)))
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(KeyErrorType.String(http.StatusText(code)))
		}
	})
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// statusWriter remembers the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap is for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// GRPC starts the server span of a call of fullMethod
// ("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit") that
// continues the trace context of the call's metadata. End it with
// EndGRPC.
func (t *Tracer) GRPC(ctx context.Context, fullMethod string) (context.Context, trace.Span) {
	ctx = t.Remote(ctx)
	name := fullMethod
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		service, method := name, ""
		for i := len(name) - 1; i >= 0; i-- {
			if name[i] == '/' {
				service, method = name[:i], name[i+1:]
				break
			}
		}
		span.SetAttributes(attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", service), attribute.String("rpc.method", method))
	}
	return ctx, span
}

// Remote returns ctx with the trace context of its incoming gRPC
// metadata, for spans that continue a stream's caller (Start).
func (t *Tracer) Remote(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return t.prop.Extract(ctx, metadataCarrier(md))
	}
	return ctx
}

// EndGRPC ends span, a GRPC span, with the status code of err (a
// status error, or nil for OK). A call the caller got wrong
// (InvalidArgument, Unauthenticated, PermissionDenied) is not a failure
// of the server's.
func EndGRPC(span trace.Span, err error) {
	if span.IsRecording() {
		code := grpcstatus.Code(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(code)))
		switch code {
		case grpccodes.OK, grpccodes.InvalidArgument, grpccodes.Unauthenticated, grpccodes.PermissionDenied:
		default:
			span.SetStatus(codes.Error, "")
			span.SetAttributes(KeyErrorType.String(code.String()))
		}
	}
	span.End()
}

// metadataCarrier reads a trace context from gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Ledger starts the span of one call of a ledger of durable quotas: op
// "record" (commits commits, one transaction) or "read". It is the
// signature of ledger.WrapOptions.Trace; the returned func ends the span
// with the call's error.
func (t *Tracer) Ledger(ctx context.Context, op string, commits int) (context.Context, func(error)) {
	name := SpanLedgerRead
	if op == "record" {
		name = SpanLedgerRecord
	}
	ctx, span := t.t.Start(ctx, name)
	if op == "record" && span.IsRecording() {
		span.SetAttributes(KeyLedgerCommits.Int(commits))
	}
	return ctx, func(err error) { EndErr(span, err) }
}

// EndErr ends span, marking it failed when err is not nil: error.type
// says the kind, never the text (which may hold a key).
func EndErr(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, "")
		span.SetAttributes(KeyErrorType.String(ErrorType(err)))
	}
	span.End()
}

// ErrorType is the error.type of err: deadline_exceeded, canceled,
// invalid (the caller's request), or _OTHER.
func ErrorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, floodgate.ErrInvalidRequest), errors.Is(err, floodgate.ErrInvalidLimit):
		return "invalid"
	}
	return "_OTHER"
}
