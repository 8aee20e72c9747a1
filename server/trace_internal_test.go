package server

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/config"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/floodgate-rl/floodgate/store/memstore"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

const traceYAML = `
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

func newTraceServer(tb testing.TB, tr *tracing.Tracer) *Server {
	tb.Helper()
	ms := memstore.New(nil)
	tb.Cleanup(func() { ms.Close() })
	d, err := config.Parse("bench.yaml", []byte(traceYAML))
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.New(d)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Options{Store: ms, Config: cfg, Tracer: tr})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestTracingOffCostsNoAllocation: with tracing off (Options.Tracer
// nil), each traced entry point allocates exactly what the untraced
// step it wraps allocates: the tracing costs a nil check and nothing
// the garbage collector sees. (A traced branch that made an argument
// escape to the heap would fail it.)
func TestTracingOffCostsNoAllocation(t *testing.T) {
	s := newTraceServer(t, nil)
	ctx := context.Background()
	ds := []Descriptor{{Entries: []config.Entry{{Key: "user", Value: "u1"}}}}
	limit := floodgate.Limit{Limit: 1_000_000_000, Period: time.Second}
	for _, c := range []struct {
		name             string
		traced, untraced func()
	}{
		{"Decide", func() { _, _ = s.Decide(ctx, "bench", ds, 1) }, func() { _, _ = s.decide(ctx, "bench", ds, 1) }},
		{"DecideInline", func() { _, _ = s.DecideInline(ctx, "u1", limit, 1) }, func() { _, _ = s.decideInline(ctx, "u1", limit, 1, "") }},
		{"Reserve", func() {
			r, _, _ := s.Reserve(ctx, "bench", ds, 1, nil)
			_, _ = r.Cancel(ctx)
		}, func() {
			r, _, _ := s.reserve(ctx, "bench", ds, 1, nil)
			_, _ = r.Cancel(ctx)
		}},
		{"ReserveInline", func() {
			r, _, _ := s.ReserveInline(ctx, "u1", limit, 1, nil)
			_, _ = r.Cancel(ctx)
		}, func() {
			r, _, _ := s.reserveInline(ctx, "u1", limit, 1, nil)
			_, _ = r.Cancel(ctx)
		}},
	} {
		traced, untraced := testing.AllocsPerRun(500, c.traced), testing.AllocsPerRun(500, c.untraced)
		if traced != untraced {
			t.Errorf("%s with tracing off: %v allocations per call, %v without the tracing branch", c.name, traced, untraced)
		}
	}
	// The store's span, inside decide, is the same call when off.
	res, p, err := s.plan("bench", ds, 1)
	if err != nil || len(res.Statuses) != 1 {
		t.Fatal(err)
	}
	if a, b := testing.AllocsPerRun(500, func() { _, _ = s.decideStore(ctx, &p) }), testing.AllocsPerRun(500, func() { _, _ = s.decidePlan(ctx, &p) }); a != b {
		t.Errorf("decideStore with tracing off: %v allocations per call, decidePlan %v", a, b)
	}
}

// discardExporter is an OTLP exporter's place in a benchmark: the batch
// processor's work is measured, the network's is not.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkDecideTracing is Server.Decide on the memory store (one
// descriptor of one rule, 100k keys) with tracing off, on with a sampler
// that samples nothing, and on with every decision sampled and its spans
// batched to an exporter that drops them.
func BenchmarkDecideTracing(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"off", nil}, {"unsampled", sdktrace.NeverSample()}, {"sampled", sdktrace.AlwaysSample()}} {
		b.Run("tracing="+c.name, func(b *testing.B) {
			var tr *tracing.Tracer
			if c.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(c.sampler), sdktrace.WithBatcher(discardExporter{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				tr = tracing.New(tp, nil)
			}
			s := newTraceServer(b, tr)
			ctx := context.Background()
			var keys [100_000]string
			for i := range keys {
				keys[i] = "u" + itoa(i)
			}
			ds := []Descriptor{{Entries: []config.Entry{{Key: "user"}}}}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				ds[0].Entries[0].Value = keys[i%len(keys)]
				if res, err := s.Decide(ctx, "bench", ds, 1); err != nil || res.Code != OK {
					b.Fatal(res.Code, err)
				}
			}
		})
	}
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}
