package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/loadgen"
	"github.com/peterbourgon/ff/v3"
)

// descriptorFlags collects repeated -descriptor flags.
type descriptorFlags []loadgen.Descriptor

func (d *descriptorFlags) String() string {
	parts := make([]string, len(*d))
	for i, x := range *d {
		parts[i] = x.String()
	}
	return strings.Join(parts, " ")
}

func (d *descriptorFlags) Set(s string) error {
	x, err := loadgen.ParseDescriptor(s)
	if err != nil {
		return err
	}
	*d = append(*d, x)
	return nil
}

// benchCmd is `floodgate bench`: a load generator for any running rate
// limit service, over Envoy's gRPC protocol or floodgate's JSON HTTP API.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floodgate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		grpcAddr    = fs.String("grpc", "", "Envoy rate limit service gRPC `host:port` to load (this or -http)")
		httpURL     = fs.String("http", "", "floodgate HTTP API `URL` to load with POST /v1/allow (this or -grpc)")
		domain      = fs.String("domain", "bench", "rate limit domain")
		descriptors descriptorFlags
		cfg         loadgen.Config
		conns       = fs.Int("conns", 4, "gRPC connections shared by the callers")
		timeout     = fs.Duration("timeout", time.Second, "deadline of each call")
		asJSON      = fs.Bool("json", false, "print the report as JSON on stdout")
		quiet       = fs.Bool("quiet", false, "no progress display on stderr")
	)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: floodgate bench (-grpc host:port | -http URL) [flags]

Loads a running rate limit service and reports decisions/s, OK/OVER_LIMIT/errors
and a latency histogram. Progress goes to stderr once a second.

  floodgate bench -grpc 127.0.0.1:8081 -domain edge -descriptor 'user={i}' -c 64 -d 10s
  floodgate bench -http http://127.0.0.1:8080 -domain edge -keys 1 -n 10000 -json

flags:
`)
		fs.PrintDefaults()
	}
	fs.Var(&descriptors, "descriptor", "descriptor `key=value[,key=value...]`; {i} in a key or value becomes the key index (or \"hot\"); repeat for several descriptors (default user={i})")
	fs.IntVar(&cfg.Callers, "c", 16, "concurrent callers, each with one call in flight")
	fs.DurationVar(&cfg.Duration, "d", 0, "how long to send (0: until -n calls; default 10s when -n is 0 too)")
	fs.Int64Var(&cfg.Requests, "n", 0, "how many calls to send (0: until -d ends)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "calls per second in total, open loop (0: each caller sends when its last call returns)")
	fs.IntVar(&cfg.Keys, "keys", 100_000, "distinct values of {i}, drawn uniformly; 1 sends one hot key")
	fs.Float64Var(&cfg.Hot, "hot", 0, "share of calls (0 to 1) that use \"hot\" for {i}")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "load sent before measuring, not counted")
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("FLOODGATE_BENCH")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "floodgate bench: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if len(descriptors) == 0 {
		descriptors = descriptorFlags{{{Key: "user", Value: loadgen.Placeholder}}}
	}
	if cfg.Duration == 0 && cfg.Requests == 0 {
		cfg.Duration = 10 * time.Second
	}
	if err := cfg.Validate(); err != nil {
		flagOf := map[string]string{"callers": "-c", "duration": "-d", "requests": "-n", "rate": "-rate",
			"keys": "-keys", "hot": "-hot", "warmup": "-warmup"}
		msg := err.Error()
		if f, rest, ok := strings.Cut(msg, ": "); ok && flagOf[f] != "" {
			msg = flagOf[f] + ": " + rest
		}
		return fail("%s", msg)
	}

	var (
		target interface {
			loadgen.Target
			Close() error
		}
		name string
		err  error
	)
	switch {
	case *grpcAddr != "" && *httpURL != "":
		return fail("-grpc and -http: choose one protocol")
	case *grpcAddr != "":
		target, err = loadgen.NewGRPC(*grpcAddr, *domain, descriptors, *conns, *timeout)
		name = "grpc " + *grpcAddr
	case *httpURL != "":
		target, err = loadgen.NewHTTP(*httpURL, *domain, descriptors, cfg.Callers, *timeout)
		name = "http " + *httpURL
	default:
		return fail("no target: give -grpc host:port (Envoy rate limit service) or -http URL (floodgate HTTP API)")
	}
	if err != nil {
		return fail("%v", err)
	}
	defer target.Close()
	name += fmt.Sprintf(" domain %s descriptors %s", *domain, descriptors.String())

	var progress *loadgen.Progress
	if !*quiet {
		progress = loadgen.NewProgress(stderr)
		cfg.Progress = progress.Update
	}
	res, err := loadgen.Run(ctx, target, cfg)
	if progress != nil {
		progress.Done()
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
		return 1
	}
	sum := loadgen.Summarize(res, name, cfg)
	if *asJSON {
		if err := sum.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
			return 1
		}
	} else {
		sum.WriteText(stdout)
	}
	if res.Total() > 0 && res.Errors == res.Total() {
		// Nothing answered: say so in the exit code for scripts.
		return 1
	}
	return 0
}
