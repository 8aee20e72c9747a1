package tracing_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/server"
	"github.com/floodgate-rl/floodgate/server/tracing"
	"github.com/floodgate-rl/floodgate/store/memstore"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A server whose decisions are traced: the decision's span and, as its
// child, the store's call. floodgate serve makes the TracerProvider from
// the OTEL_* variables (docs/tracing.md); here the spans are kept in
// memory.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())

	store := memstore.New(nil)
	defer store.Close()
	srv, err := server.New(server.Options{Store: store, Tracer: tracing.New(tp, nil)})
	if err != nil {
		panic(err)
	}
	if _, err := srv.DecideInline(context.Background(), "user:alice", floodgate.Limit{Limit: 10, Period: time.Minute}, 1); err != nil {
		panic(err)
	}
	for _, s := range spans.GetSpans() {
		fmt.Print(s.Name)
		for _, a := range s.Attributes {
			if a.Key == tracing.KeyOutcome {
				fmt.Print(" ", a.Value.AsString())
			}
		}
		fmt.Println()
	}
	// Output:
	// floodgate.store
	// floodgate.decide allowed
}
