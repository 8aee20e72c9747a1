package main

import (
	"strings"
	"testing"
)

// TestTracingEnv: which variables turn tracing on, which protocol they
// choose, and which values stop serve at start with the variable named.
func TestTracingEnv(t *testing.T) {
	for _, c := range []struct {
		name     string
		flag     bool
		env      map[string]string
		on       bool
		protocol string
		problem  string // a substring of the problem; "" for none
	}{
		{name: "nothing set", protocol: "http/protobuf"},
		{name: "flag", flag: true, on: true, protocol: "http/protobuf"},
		{name: "exporter otlp", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, protocol: "http/protobuf"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true, protocol: "grpc"},
		{name: "traces endpoint, traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, protocol: "http/protobuf"},
		{name: "sdk disabled", flag: true, env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, protocol: "http/protobuf"},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, protocol: "http/protobuf"},
		{name: "exporter none and flag", flag: true, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, problem: "OTEL_TRACES_EXPORTER=none"},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, problem: `OTEL_TRACES_EXPORTER: "zipkin"`},
		{name: "http/json", flag: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, problem: "OTEL_EXPORTER_OTLP_PROTOCOL: http/json"},
		{name: "unknown protocol", flag: true, env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, problem: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "udp"`},
		{name: "sampler ratio", flag: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}, on: true, protocol: "http/protobuf"},
		{name: "sampler ratio above 1", flag: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, problem: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "sampler ratio NaN", flag: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "NaN"}, problem: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "unknown sampler", flag: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, problem: `OTEL_TRACES_SAMPLER: "sometimes"`},
		{name: "propagators", flag: true, env: map[string]string{"OTEL_PROPAGATORS": "tracecontext,baggage"}, on: true, protocol: "http/protobuf"},
		{name: "b3", flag: true, env: map[string]string{"OTEL_PROPAGATORS": "tracecontext,b3"}, problem: `OTEL_PROPAGATORS: "b3"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string { return c.env[k] }
			problem := tracingProblem(c.flag, getenv)
			if c.problem != "" {
				if !strings.Contains(problem, c.problem) {
					t.Fatalf("problem %q, want one with %q", problem, c.problem)
				}
				return
			}
			if problem != "" {
				t.Fatalf("problem %q, want none", problem)
			}
			if on, _ := tracingWanted(c.flag, getenv); on != c.on {
				t.Errorf("on: %v, want %v", on, c.on)
			}
			if p, _ := otlpProtocol(getenv); p != c.protocol {
				t.Errorf("protocol %q, want %q", p, c.protocol)
			}
		})
	}
}

// FuzzTracingEnv: no value of the variables serve reads itself makes it
// panic, and a value it accepts gives a protocol and a propagator.
func FuzzTracingEnv(f *testing.F) {
	f.Add("otlp", "grpc", "tracecontext,baggage", "parentbased_traceidratio", "0.5")
	f.Add("none", "http/json", "b3", "always_on", "")
	f.Add(" OTLP ", " http/protobuf ", ",,none", "traceidratio", "NaN")
	f.Fuzz(func(t *testing.T, exporter, protocol, propagators, sampler, arg string) {
		env := map[string]string{"OTEL_TRACES_EXPORTER": exporter, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
			"OTEL_PROPAGATORS": propagators, "OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": arg}
		getenv := func(k string) string { return env[k] }
		if tracingProblem(true, getenv) != "" {
			return
		}
		if p, problem := otlpProtocol(getenv); problem != "" || (p != "grpc" && p != "http/protobuf") {
			t.Fatalf("accepted, yet protocol %q (%s)", p, problem)
		}
		if prop, problem := propagatorOf(getenv); problem != "" || prop == nil {
			t.Fatalf("accepted, yet no propagator (%s)", problem)
		}
	})
}
