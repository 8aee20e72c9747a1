package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-rl/floodgate/server/tracing"
)

// registerOTel registers -otel.
func (c *serveConfig) registerOTel(fs *flag.FlagSet) {
	fs.BoolVar(&c.otel, "otel", false, "export a trace of every decision, reservation and ledger write over OTLP, configured by the standard OTEL_* variables (endpoint, protocol, headers, sampler: docs/tracing.md); also on without it when OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint variable is set (env FLOODGATE_OTEL)")
}

// tracingProblem is the problem of the OTEL_* variables serve reads
// itself (the exporters read the rest), naming the variable, or "".
func tracingProblem(on bool, getenv func(string) string) string {
	_, problem := tracingWanted(on, getenv)
	if problem != "" {
		return problem
	}
	if _, problem = otlpProtocol(getenv); problem != "" {
		return problem
	}
	if _, problem = propagatorOf(getenv); problem != "" {
		return problem
	}
	return samplerProblem(getenv)
}

// tracingWanted reports whether traces are exported: -otel (on),
// OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint variable, unless
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
func tracingWanted(on bool, getenv func(string) string) (bool, string) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, ""
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "", "otlp":
	case "none":
		if on {
			return false, "-otel: OTEL_TRACES_EXPORTER=none says not to export traces; unset one of them"
		}
		return false, ""
	default:
		return false, fmt.Sprintf("OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", exporter)
	}
	return on || exporter == "otlp" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "", ""
}

// otlpProtocol is the OTLP protocol of traces:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else the specification's default, http/protobuf.
func otlpProtocol(getenv func(string) string) (string, string) {
	name, p := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if p == "" {
		name, p = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p = strings.TrimSpace(p); p {
	case "":
		return "http/protobuf", ""
	case "grpc", "http/protobuf":
		return p, ""
	case "http/json":
		return "", name + ": http/json is not supported by the OpenTelemetry Go exporter; use http/protobuf or grpc"
	}
	return "", fmt.Sprintf("%s: %q is not grpc or http/protobuf", name, p)
}

// propagatorOf is the propagator of OTEL_PROPAGATORS: W3C Trace Context
// by default and for "tracecontext"; none for "none". Baggage is
// accepted and not read (no span takes a value from it).
func propagatorOf(getenv func(string) string) (propagation.TextMapPropagator, string) {
	v := strings.TrimSpace(getenv("OTEL_PROPAGATORS"))
	if v == "" {
		return propagation.TraceContext{}, ""
	}
	var ps []propagation.TextMapPropagator
	for p := range strings.SplitSeq(v, ",") {
		switch p = strings.ToLower(strings.TrimSpace(p)); p {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage", "none":
		default:
			return nil, fmt.Sprintf("OTEL_PROPAGATORS: %q is not supported (tracecontext, baggage or none)", p)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), ""
}

// samplerProblem checks OTEL_TRACES_SAMPLER and its argument, which the
// SDK reads, so that a mistake stops serve instead of being logged once
// and ignored.
func samplerProblem(getenv func(string) string) string {
	s := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	switch s {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return ""
	case "traceidratio", "parentbased_traceidratio":
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			return ""
		}
		if r, err := strconv.ParseFloat(arg, 64); err != nil || !(r >= 0 && r <= 1) {
			return fmt.Sprintf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio from 0 to 1", arg)
		}
		return ""
	}
	return fmt.Sprintf("OTEL_TRACES_SAMPLER: %q is not supported (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)", s)
}

// tracingDefaults are OpenTelemetry settings a caller gives in place of
// the SDK's defaults, each where no OTEL_* variable gives it:
// `floodgate ratelimit`'s TRACING_* (upstreamMode.tracingDefaults). The
// zero value changes nothing.
type tracingDefaults struct {
	// protocol is the OTLP protocol unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
	// or OTEL_EXPORTER_OTLP_PROTOCOL is set; "" keeps http/protobuf.
	protocol string
	// attrs are resource attributes, under those of OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES.
	attrs []attribute.KeyValue
	// sampler, named samplerName for the log, is the sampler unless
	// OTEL_TRACES_SAMPLER is set; nil keeps the SDK's.
	sampler     sdktrace.Sampler
	samplerName string
}

// apply is the protocol of d under the OTEL_* variables of getenv, and
// its sampler unless they name one (nil: the SDK reads
// OTEL_TRACES_SAMPLER, or keeps its default).
func (d tracingDefaults) apply(getenv func(string) string) (protocol string, sampler sdktrace.Sampler) {
	protocol, _ = otlpProtocol(getenv)
	unset := func(name string) bool { return strings.TrimSpace(getenv(name)) == "" }
	if d.protocol != "" && unset("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") && unset("OTEL_EXPORTER_OTLP_PROTOCOL") {
		protocol = d.protocol
	}
	if unset("OTEL_TRACES_SAMPLER") {
		sampler = d.sampler
	}
	return protocol, sampler
}

// startTracing starts exporting traces when tracingWanted says so,
// returning the Tracer for the server (nil when off) and the function
// that flushes and stops the exporter. The exporter reads its endpoint,
// headers, timeout, compression and TLS files from the OTEL_EXPORTER_OTLP_*
// variables itself, the SDK the sampler (OTEL_TRACES_SAMPLER) and the
// batching (OTEL_BSP_*), the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to floodgate).
func (c serveConfig) startTracing(ctx context.Context, log *slog.Logger) (*tracing.Tracer, func(), error) {
	on, _ := tracingWanted(c.otel, os.Getenv)
	if !on {
		return nil, func() {}, nil
	}
	defaults := c.mode.tracingDefaults()
	protocol, sampler := defaults.apply(os.Getenv)
	prop, _ := propagatorOf(os.Getenv)
	var exp sdktrace.SpanExporter
	var err error
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter (%s): %w", protocol, err)
	}
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	// Later attributes win: the defaults' over floodgate's, the OTEL_*
	// variables' (WithFromEnv) over both.
	attrs := append([]attribute.KeyValue{attribute.String("service.name", "floodgate"), attribute.String("service.version", version)}, defaults.attrs...)
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	samplerName := "OTEL_TRACES_SAMPLER, or the SDK's default"
	if sampler != nil {
		opts = append(opts, sdktrace.WithSampler(sampler))
		samplerName = defaults.samplerName
	}
	tp := sdktrace.NewTracerProvider(opts...)
	// The SDK reports export failures here; a failed export loses spans,
	// never a decision.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "error", err)
	}))
	log.Info("exporting traces over OTLP", "protocol", protocol, "service", serviceName(res), "sampler", samplerName)
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing the last spans failed", "error", err)
		}
	}
	return tracing.New(tp, prop), stop, nil
}

// serviceName is the service.name of res, for the log.
func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value("service.name")
	return v.AsString()
}
