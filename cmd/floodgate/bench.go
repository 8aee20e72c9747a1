package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate"
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
	b, code, ok := parseBench(args, stderr)
	if !ok {
		return code
	}
	target, name, err := b.target()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
		return 2
	}
	defer target.Close()
	return b.run(ctx, target, name, stdout, stderr)
}

// benchConfig is what `floodgate bench` reads from its flags.
type benchConfig struct {
	grpcAddr, httpURL, domain string
	descriptors               descriptorFlags
	load                      loadgen.Config
	conns                     int
	timeout                   time.Duration
	asJSON, quiet             bool
}

// parseBench reads and checks the flags; ok is false when the command
// should exit with code.
func parseBench(args []string, stderr io.Writer) (b benchConfig, code int, ok bool) {
	fs := flag.NewFlagSet("floodgate bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&b.grpcAddr, "grpc", "", "Envoy rate limit service gRPC `host:port` to load (this or -http)")
	fs.StringVar(&b.httpURL, "http", "", "floodgate HTTP API `URL` to load with POST /v1/allow (this or -grpc)")
	fs.StringVar(&b.domain, "domain", "bench", "rate limit domain")
	fs.IntVar(&b.conns, "conns", 4, "gRPC connections shared by the callers")
	fs.DurationVar(&b.timeout, "timeout", time.Second, "deadline of each call")
	fs.BoolVar(&b.asJSON, "json", false, "print the report as JSON on stdout")
	fs.BoolVar(&b.quiet, "quiet", false, "no progress display on stderr")
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
	fs.Var(&b.descriptors, "descriptor", "descriptor `key=value[,key=value...]`; {i} in a key or value becomes the key index (or \"hot\"); repeat for several descriptors (default user={i})")
	fs.IntVar(&b.load.Callers, "c", 16, "concurrent callers, each with one call in flight")
	fs.DurationVar(&b.load.Duration, "d", 0, "how long to send (0: until -n calls; default 10s when -n is 0 too)")
	fs.Int64Var(&b.load.Requests, "n", 0, "how many calls to send (0: until -d ends)")
	fs.Float64Var(&b.load.Rate, "rate", 0, "calls per second in total, open loop (0: each caller sends when its last call returns)")
	fs.IntVar(&b.load.Keys, "keys", 100_000, "distinct values of {i}, drawn uniformly; 1 sends one hot key")
	fs.Float64Var(&b.load.Hot, "hot", 0, "share of calls (0 to 1) that use \"hot\" for {i}")
	fs.DurationVar(&b.load.Warmup, "warmup", 0, "load sent before measuring, not counted")
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("FLOODGATE_BENCH")); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return b, 0, false
		}
		fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
		return b, 2, false
	}
	if problem := b.check(fs); problem != "" {
		fmt.Fprintf(stderr, "floodgate bench: %s\n", problem)
		return b, 2, false
	}
	return b, 0, true
}

// check fills in the defaults that depend on other flags and reports the
// first problem of the flags, or "".
func (b *benchConfig) check(fs *flag.FlagSet) string {
	if fs.NArg() > 0 {
		return fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	}
	if len(b.descriptors) == 0 {
		b.descriptors = descriptorFlags{{{Key: "user", Value: loadgen.Placeholder}}}
	}
	if b.load.Duration == 0 && b.load.Requests == 0 {
		b.load.Duration = 10 * time.Second
	}
	if err := b.load.Validate(); err != nil {
		return benchFlagError(err)
	}
	switch {
	case b.grpcAddr != "" && b.httpURL != "":
		return "-grpc and -http: choose one protocol"
	case b.grpcAddr == "" && b.httpURL == "":
		return "no target: give -grpc host:port (Envoy rate limit service) or -http URL (floodgate HTTP API)"
	}
	return ""
}

// benchTarget is a service to load.
type benchTarget interface {
	loadgen.Target
	Close() error
}

// target connects to the service of -grpc or -http and names it for the
// report.
func (b *benchConfig) target() (benchTarget, string, error) {
	var t benchTarget
	var name string
	var err error
	if b.grpcAddr != "" {
		t, err = loadgen.NewGRPC(b.grpcAddr, b.domain, b.descriptors, b.conns, b.timeout)
		name = "grpc " + b.grpcAddr
	} else {
		t, err = loadgen.NewHTTP(b.httpURL, b.domain, b.descriptors, b.load.Callers, b.timeout)
		name = "http " + b.httpURL
	}
	if err != nil {
		return nil, "", err
	}
	return t, name + fmt.Sprintf(" domain %s descriptors %s", b.domain, b.descriptors.String()), nil
}

// run loads target, showing progress on stderr unless -quiet, and writes
// the report on stdout. The exit code is 1 when nothing answered.
func (b *benchConfig) run(ctx context.Context, target benchTarget, name string, stdout, stderr io.Writer) int {
	cfg := b.load
	var progress *loadgen.Progress
	if !b.quiet {
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
	if b.asJSON {
		if err := sum.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "floodgate bench: %v\n", err)
			return 1
		}
	} else {
		sum.WriteText(stdout)
	}
	for _, w := range sum.Warnings() {
		fmt.Fprintln(stderr, "floodgate bench: "+w)
	}
	if res.Total() > 0 && res.Errors == res.Total() {
		// Nothing answered: say so in the exit code for scripts.
		return 1
	}
	return 0
}

// benchFlagError names the flag of a problem of loadgen.Config.
func benchFlagError(err error) string {
	fe, ok := errors.AsType[*floodgate.FieldError](err)
	if !ok {
		return err.Error()
	}
	flag := map[string]string{"callers": "-c", "duration": "-d", "requests": "-n", "rate": "-rate",
		"keys": "-keys", "hot": "-hot", "warmup": "-warmup"}[fe.Field]
	if flag == "" {
		flag = fe.Field
	}
	return flag + ": " + fe.Problem
}
